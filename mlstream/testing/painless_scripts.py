"""Painless process functions in the style of those ml-commons publishes, for the tests
and the benchmark. Each is our own script, written the way the document named above it
(under ``docs/`` of opensearch-project/ml-commons) writes its own: the same constructs,
the same params, the same output shape.
"""

from __future__ import annotations

# remote_inference_blueprints/bedrock_connector_titan_embedding_blueprint.md: the first document quoted into the request's JSON
TITAN_EMBEDDING_PRE = """
    StringBuilder quoted = new StringBuilder();
    quoted.append("\\"");
    String doc = params.text_docs[0];
    quoted.append(doc);
    quoted.append("\\"");
    def parameters = "{" + "\\"inputText\\":" + quoted + "}";
    return "{" + "\\"parameters\\":" + parameters + "}";
"""


# remote_inference_blueprints/bedrock_connector_titan_embedding_blueprint.md: the vector printed into one tensor's JSON
TITAN_EMBEDDING_POST = """
    def name = "sentence_embedding";
    def kind = "FLOAT32";
    if (params.embedding == null || params.embedding.length == 0) {
      return params.message;
    }
    def shape = [params.embedding.length];
    def json = "{" + "\\"name\\":\\"" + name + "\\"," + "\\"data_type\\":\\"" + kind + "\\"," +
               "\\"shape\\":" + shape + "," + "\\"data\\":" + params.embedding + "}";
    return json;
"""


# remote_inference_blueprints/bedrock_connector_titan_multimodal_embedding_blueprint.md: text, image or both
MULTIMODAL_PRE = """
    StringBuilder out = new StringBuilder("{");
    if (params.text_docs.length > 0 && params.text_docs[0] != null) {
      out.append("\\"inputText\\":\\"");
      out.append(params.text_docs[0]);
      out.append("\\"");
      if (params.text_docs.length > 1 && params.text_docs[1] != null) {
        out.append(",");
      }
    }
    if (params.text_docs.length > 1 && params.text_docs[1] != null) {
      out.append("\\"inputImage\\":\\"").append(params.text_docs[1]).append("\\"");
    }
    out.append("}");
    return "{" + "\\"parameters\\":" + out + "}";
"""


# tutorials/rerank/rerank_pipeline_with_Amazon_Rerank_model_on_Amazon_Bedrock.md: the documents as a JSON array
RERANK_PRE = """
    def query = params.query_text;
    def docs = params.text_docs;
    def list = new StringBuilder('[');
    for (int i = 0; i < docs.length; i++) {
      list.append('"').append(docs[i]).append('"');
      if (i < docs.length - 1) {
        list.append(',');
      }
    }
    list.append(']');
    def parameters = '{ "query": "' + query + '", "documents": ' + list.toString() + ' }';
    return '{"parameters": ' + parameters + '}';
"""


# tutorials/rerank/rerank_pipeline_with_Amazon_Rerank_model_on_Amazon_Bedrock.md: scores back at their documents' index
RERANK_POST = """
    if (params.results == null || params.results.length == 0) {
      throw new IllegalArgumentException("Post process function input is empty.");
    }
    def results = params.results;
    def scores = new Double[results.length];
    for (int i = 0; i < results.length; i++) {
      def index = new BigDecimal(results[i].index.toString()).intValue();
      scores[index] = results[i].relevance_score;
    }
    def out = new StringBuilder('[');
    for (int i = 0; i < scores.length; i++) {
      out.append(' {"name": "similarity", "data_type": "FLOAT32", "shape": [1],');
      out.append('"data": [').append(scores[i]).append(']}');
      if (i < results.length - 1) { out.append(','); }
    }
    out.append(']');
    return out.toString();
"""


# tutorials/rerank/rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md: its own escape
CROSS_ENCODER_PRE = """
    String escape(def text) {
      if (text.contains("\\\\")) { text = text.replace("\\\\", "\\\\\\\\"); }
      if (text.contains("\\"")) { text = text.replace("\\"", "\\\\\\""); }
      return text;
    }
    String query = params.query_text;
    StringBuilder pairs = new StringBuilder('[');
    for (int i = 0; i < params.text_docs.length; i++) {
      pairs.append('{"text":"').append(escape(query)).append('", "text_pair":"');
      pairs.append(escape(params.text_docs[i])).append('"}');
      if (i < params.text_docs.length - 1) { pairs.append(','); }
    }
    pairs.append(']');
    return '{"parameters": { "inputs": ' + pairs + ' }}';
"""


# tutorials/rerank/rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md: one tensor per score
CROSS_ENCODER_POST = """
    if (params.result == null) {
      return 'no result generated';
    }
    def out = new StringBuilder('[ ');
    for (int i = 0; i < params.result.length; i++) {
      out.append(' {"name": "similarity", "data_type": "FLOAT32", "shape": [1],');
      out.append('"data": [');
      out.append(params.result[i].score);
      out.append(']}');
      if (i < params.result.length - 1) { out.append(','); }
    }
    return out.append(']').toString();
"""


# non-string parameters (numbers, booleans, lists) in a pre-process script's output
TYPED_PARAMETERS_PRE = """
    def parameters = ['texts': params.text_docs, 'count': params.text_docs.size(), 'truncate': 'END',
                      'scale': 0.0001, 'flag': true];
    StringBuilder json = new StringBuilder('{"parameters": {');
    json.append('"texts": ["').append(params.text_docs[0]).append('"], ');
    json.append('"count": ').append(parameters.count).append(', ');
    json.append('"scale": ').append(parameters.scale).append(', ');
    json.append('"flag": ').append(parameters.flag).append(', "truncate": "END"}}');
    return json.toString();
"""


# remote_inference_blueprints/llm_judgment/deepseek_chat_blueprint.md (and azure_openai, ollama): escape(), undeclared
JUDGMENT_POST = ("def text = params.choices[0].message.content; "
                 "return '{\"name\":\"response\",\"dataAsMap\":{\"response\":\"' + escape(text) + '\"}}'")


# remote_inference_blueprints/llm_judgment/anthropic_claude_bedrock_blueprint.md
CLAUDE_JUDGMENT_POST = ("def text = params.content[0].text; "
                        "return '{\"name\":\"response\",\"dataAsMap\":{\"response\":\"' + escape(text) + '\"}}'")


# tutorials/aws/RAG_with_DeepSeek_R1_model_on_Sagemaker.md: throw on an empty answer
DEEPSEEK_POST = """
    if (params.result == null || params.result.length == 0) {
      throw new Exception('No response available');
    }
    def completion = params.result[0].generated_text;
    return '{' + '"name": "response",' + '"dataAsMap": {' + '"completion":"' + escape(completion) + '"}' + '}';
"""


# tutorials/semantic_search/semantic_search_with_byte_quantized_vector.md: element by element
QUANTIZED_POST = """
    def kind = "FLOAT32";
    def result;
    if (params.embeddings.int8 != null) {
      kind = "INT8";
      result = params.embeddings.int8;
    } else if (params.embeddings.float != null) {
      result = params.embeddings.float;
    }
    if (result == null) {
      return "Invalid embedding result";
    }
    def all = new StringBuilder("[");
    for (int m = 0; m < result.length; m++) {
      def size = result[m].length;
      def vector = new StringBuilder("[");
      for (int i = 0; i < size; i++) {
        def value;
        if ("FLOAT32".equals(kind)) {
          value = result[m][i].floatValue();
        } else {
          value = result[m][i].intValue();
        }
        vector.append(value);
        if (i < size - 1) { vector.append(","); }
      }
      vector.append("]");
      all.append('{"name":"sentence_embedding","data_type":"FLOAT32","shape":' + [size] + ',"data":' + vector + '}');
      if (m < result.length - 1) { all.append(","); }
    }
    return all.append("]").toString();
"""


# tutorials/guardrails/use_bedrock_guardrails.md: throw, else null
GUARDRAIL_POST = ("if (params['amazon-bedrock-guardrailAction'] == 'INTERVENED') "
                  "throw new IllegalArgumentException(\"blocked by the guardrail\");")


# remote_inference_blueprints/bedrock_connector_ai21labs_jurassic_blueprint.md: plain text
TEXT_POST = "return params['completions'][0].data.text;"


# tutorials/aws/semantic_search_with_CFN_template_for_Sagemaker.md: a SageMaker array answer (params.result)
SAGEMAKER_EMBEDDING_POST = """
    if (params.result == null || params.result.length == 0) {
      return null;
    }
    def vector = params.result[0];
    return '{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [' + vector.size() + '], ' +
           '"data": ' + vector + '}';
"""


# tutorials/rerank/rerank_pipeline_with_bge-rerank-m3-v2_model_deployed_on_Sagemaker.md: scores back at their index
BGE_POST = """
    if (params.result == null || params.result.length == 0) {
      throw new IllegalArgumentException("Post process function input is empty.");
    }
    def outputs = params.result;
    def scores = new Double[outputs.length];
    for (int i = 0; i < outputs.length; i++) {
      scores[(int) outputs[i].index] = outputs[i].score;
    }
    def out = new StringBuilder('[');
    for (int i = 0; i < scores.length; i++) {
      if (i > 0) { out.append(','); }
      out.append('{"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [' + scores[i] + ']}');
    }
    return out.append(']').toString();
"""


# remote_inference_blueprints/llm_judgment/bedrock_converse_blueprint.md
CONVERSE_JUDGMENT_POST = ("def text = params.output.message.content[0].text; "
                          "return '{\"name\":\"response\",\"dataAsMap\":{\"response\":\"' + escape(text) + '\"}}'")


# tutorials/rerank/rerank_pipeline_with_bge-rerank-m3-v2_model_deployed_on_Sagemaker.md: query and texts
BGE_PRE = RERANK_PRE.replace('"documents": ', '"texts": ')


# the Titan blueprint's style over OpenAI's embeddings answer: every vector printed into the tensors' JSON
OPENAI_EMBEDDING_POST = """
    def out = new StringBuilder('[');
    for (int i = 0; i < params.data.length; i++) {
      def vector = params.data[i].embedding;
      if (i > 0) { out.append(','); }
      out.append('{"name":"sentence_embedding","data_type":"FLOAT32","shape":[' + vector.size() + '],');
      out.append('"data":' + vector + '}');
    }
    return out.append(']').toString();
"""
