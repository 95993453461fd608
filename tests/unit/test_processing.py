"""ml-commons' input shapes and built-in process functions, table by table.

Each case names the ml-commons source it follows (paths under
common/src/main/java/org/opensearch/ml/common/ unless they say otherwise). The test
data is our own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream import processing
from mlstream.errors import BadRequest, UpstreamError
from mlstream.processing import (
    PredictInput,
    TextDocs,
    TextSimilarity,
    chunk_size,
    escape_input_parameters,
    parse_predict_input,
    post_process,
    pre_process,
    split_dataset,
)
from mlstream.processing.builtin_post import POST_PROCESS_FUNCTIONS
from mlstream.processing.builtin_pre import PRE_PROCESS_FUNCTIONS
from mlstream.processing.scripts import (
    CONVERT_INPUT_TO_JSON_STRING,
    CONVERT_PARAMETERS_TO_OBJECTS,
    PROCESS_REMOTE_INFERENCE_INPUT,
)
from mlstream.processing.tensors import data_type_from_filter

# ------------------------------------------------------------------ the _predict body
# input/remote/RemoteInferenceMLInput.java (parameters), input/MLInput.java (text_docs,
# query_text, return_number, target_response)

INPUTS = [
    ("parameters", {"parameters": {"input": ["a"]}}, None, PredictInput({"input": ["a"]}, None)),
    ("empty", {}, None, PredictInput({}, None)),
    ("text-docs", {"text_docs": ["a", "b"]}, None, PredictInput({}, TextDocs(("a", "b")))),
    ("text-docs-neural-search-options",
     {"text_docs": ["a"], "return_number": True, "target_response": ["sentence_embedding"]}, None,
     PredictInput({}, TextDocs(("a",)))),
    ("text-docs-null-for-multimodal", {"text_docs": [None, "aW1n"]}, "text_embedding",
     PredictInput({}, TextDocs((None, "aW1n")))),
    ("similarity", {"query_text": "q", "text_docs": ["d1", "d2"]}, None,
     PredictInput({}, TextSimilarity("q", ("d1", "d2")))),
    ("similarity-by-algorithm", {"query_text": "q", "text_docs": ["d"]}, "TEXT_SIMILARITY",
     PredictInput({}, TextSimilarity("q", ("d",)))),
    ("parameters-with-docs", {"text_docs": ["a"], "parameters": {"input_type": "query"}}, "text_embedding",
     PredictInput({"input_type": "query"}, TextDocs(("a",)))),
]


@pytest.mark.parametrize("body, algorithm, expected", [c[1:] for c in INPUTS], ids=[c[0] for c in INPUTS])
def test_predict_input(body: Any, algorithm: str | None, expected: PredictInput) -> None:
    assert parse_predict_input(body, algorithm) == expected


BAD_INPUTS = [
    ("not-object", [], None, "must be a JSON object"),
    ("unknown-field", {"prompt": "x"}, None, "unknown field [prompt]"),
    ("parameters-not-object", {"parameters": []}, None, "[parameters] must be a JSON object"),
    ("docs-not-list", {"text_docs": "a"}, None, "[text_docs] must be a list of strings"),
    ("docs-empty", {"text_docs": []}, None, "[text_docs] must not be empty"),
    ("docs-number", {"text_docs": [1]}, "text_embedding", "list of strings (or null)"),
    ("embedding-without-docs", {"parameters": {}}, "text_embedding", "[text_docs] must be a list"),
    ("embedding-with-query", {"query_text": "q", "text_docs": ["a"]}, "text_embedding", "[query_text] is for"),
    ("similarity-without-query", {"text_docs": ["a"]}, "text_similarity", "expects [query_text]"),
    ("similarity-null-doc", {"query_text": "q", "text_docs": [None]}, "text_similarity", "list of strings"),
    ("remote-with-docs", {"text_docs": ["a"]}, "remote", "need algorithm text_embedding"),
    ("unknown-algorithm", {"text_docs": ["a"]}, "kmeans", "[algorithm] must be one of"),
    ("return-number-not-bool", {"text_docs": ["a"], "return_number": "yes"}, None, "[return_number]"),
    ("target-response-not-list", {"text_docs": ["a"], "target_response": "x"}, None, "[target_response]"),
]


@pytest.mark.parametrize("body, algorithm, message", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_predict_input_refused(body: Any, algorithm: str | None, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_predict_input(body, algorithm)
    assert message in caught.value.reason


# ------------------------------------------------------------------ escaping
# ml-algorithms/.../remote/ConnectorUtils.java escapeRemoteInferenceInputData;
# utils/StringUtils.java isJson (an object or array only)

ESCAPES = [
    ("plain-kept", {"p": "hello"}, {"p": "hello"}),
    ("quotes", {"p": 'say "hi"'}, {"p": 'say \\"hi\\"'}),
    ("newline-tab-backslash", {"p": "a\nb\tc\\"}, {"p": "a\\nb\\tc\\\\"}),
    ("json-object-text-kept", {"p": '{"a": "b"}'}, {"p": '{"a": "b"}'}),
    ("json-array-text-kept", {"p": '["a\\"b"]'}, {"p": '["a\\"b"]'}),
    ("json-scalar-text-escaped", {"p": '"quoted"'}, {"p": '\\"quoted\\"'}),
    ("broken-json-escaped", {"p": '{"a": }'}, {"p": '{\\"a\\": }'}),
    ("non-strings-kept", {"n": 3, "l": ['"'], "b": True, "x": None}, {"n": 3, "l": ['"'], "b": True, "x": None}),
    ("no-escape-params", {"p": '"a"', "q": '"b"', "no_escape_params": "p, other"},
     {"p": '"a"', "q": '\\"b\\"', "no_escape_params": "p, other"}),
    ("unicode-kept", {"p": "é 日本"}, {"p": "é 日本"}),
]


@pytest.mark.parametrize("parameters, expected", [c[1:] for c in ESCAPES], ids=[c[0] for c in ESCAPES])
def test_escape_input_parameters(parameters: dict[str, Any], expected: dict[str, Any]) -> None:
    assert escape_input_parameters(parameters) == expected


def test_escaped_parameter_keeps_a_body_valid() -> None:
    prompt = 'Rate "doc" \\ on\n1-5'
    text = escape_input_parameters({"p": prompt})["p"]
    assert json.loads('{"content": "' + text + '"}') == {"content": prompt}


# ------------------------------------------------------------------ pre-process functions
# connector/MLPreProcessFunction.java maps each name to a class in connector/functions/preprocess/

PRE = "connector.pre_process."
DOCS = TextDocs(("first doc", 'second "doc"'))
SIMILARITY = TextSimilarity("what is a fox", ("a fox is an animal", "the sky"))

PRE_CASES = [
    # OpenAIEmbeddingPreProcessFunction.java
    ("openai", PRE + "openai.embedding", DOCS, {"input": ["first doc", 'second "doc"']}),
    # MLPreProcessFunction.java: default.embedding is the OpenAI function
    ("default", PRE + "default.embedding", DOCS, {"input": ["first doc", 'second "doc"']}),
    # ConnectorUtils.java getPreprocessFunction: text_docs and no function -> default.embedding
    ("none-with-docs", None, DOCS, {"input": ["first doc", 'second "doc"']}),
    # CohereEmbeddingPreProcessFunction.java
    ("cohere", PRE + "cohere.embedding", DOCS, {"texts": ["first doc", 'second "doc"']}),
    # BedrockEmbeddingPreProcessFunction.java: the first document only
    ("bedrock", PRE + "bedrock.embedding", DOCS, {"inputText": "first doc"}),
    ("bedrock-nova-text", PRE + "bedrock.nova.text_embedding", DOCS, {"inputText": "first doc"}),
    # MultiModalConnectorPreProcessFunction.java
    ("multimodal-text-image", PRE + "bedrock.multimodal_embedding", TextDocs(("a cat", "aW1hZ2U=")),
     {"inputText": "a cat", "inputImage": "aW1hZ2U="}),
    ("multimodal-image-only", PRE + "bedrock.multimodal_embedding", TextDocs((None, "aW1hZ2U=")),
     {"inputText": None, "inputImage": "aW1hZ2U="}),
    ("multimodal-text-only", PRE + "bedrock.multimodal_embedding", TextDocs(("a cat",)), {"inputText": "a cat"}),
    # ImageEmbedding/VideoEmbedding/AudioEmbeddingPreProcessFunction.java
    ("nova-image", PRE + "bedrock.nova.image_embedding", TextDocs(("aW1n",)), {"inputImage": "aW1n"}),
    ("nova-video", PRE + "bedrock.nova.video_embedding", TextDocs(("dmlk",)), {"inputVideo": "dmlk"}),
    ("nova-audio", PRE + "bedrock.nova.audio_embedding", TextDocs(("YXVk",)), {"inputAudio": "YXVk"}),
    # NovaMultiModalEmbeddingPreProcessFunction.java
    ("nova-multimodal-plain", PRE + "bedrock.nova.embedding", TextDocs(("just text",)), {"text": "just text"}),
    ("nova-multimodal-image", PRE + "bedrock.nova.embedding", TextDocs(('{"image": "aW1n"}',)), {"image": "aW1n"}),
    ("nova-multimodal-text", PRE + "bedrock.nova.embedding", TextDocs(('{"text": "hi"}',)), {"text": "hi"}),
    ("nova-multimodal-other-object", PRE + "bedrock.nova.embedding", TextDocs(('{"x": 1}',)), {"text": '{"x": 1}'}),
    # CohereMultiModalEmbeddingPreProcessFunction.java
    ("cohere-images", PRE + "cohere.multimodal_embedding", TextDocs(("data:image/png;base64,aW1n",)),
     {"images": ["data:image/png;base64,aW1n"]}),
    # CohereRerankPreProcessFunction.java (also default.rerank)
    ("cohere-rerank", PRE + "cohere.rerank", SIMILARITY,
     {"query": "what is a fox", "documents": ["a fox is an animal", "the sky"], "top_n": 2}),
    ("default-rerank", PRE + "default.rerank", SIMILARITY,
     {"query": "what is a fox", "documents": ["a fox is an animal", "the sky"], "top_n": 2}),
    # BedrockRerankPreProcessFunction.java
    ("bedrock-rerank", PRE + "bedrock.rerank", SIMILARITY, {
        "queries": [{"textQuery": {"text": "what is a fox"}, "type": "TEXT"}],
        "sources": [{"inlineDocumentSource": {"textDocument": {"text": "a fox is an animal"}, "type": "TEXT"},
                     "type": "INLINE"},
                    {"inlineDocumentSource": {"textDocument": {"text": "the sky"}, "type": "TEXT"},
                     "type": "INLINE"}],
        "numberOfResults": 2}),
    # ConnectorPreProcessFunction.java returnDirectlyForRemoteInferenceInput: parameters pass
    ("parameters-pass-through", PRE + "openai.embedding", None, {}),
]


@pytest.mark.parametrize("function, dataset, expected", [c[1:] for c in PRE_CASES], ids=[c[0] for c in PRE_CASES])
def test_pre_process(function: str | None, dataset: Any, expected: dict[str, Any]) -> None:
    assert pre_process(function, dataset) == expected


def test_every_ml_commons_pre_process_name_is_built_in() -> None:
    # the constants of connector/MLPreProcessFunction.java
    names = {"cohere.embedding", "cohere.multimodal_embedding", "openai.embedding", "bedrock.embedding",
             "bedrock.multimodal_embedding", "bedrock.nova.embedding", "bedrock.nova.text_embedding",
             "bedrock.nova.image_embedding", "bedrock.nova.video_embedding", "bedrock.nova.audio_embedding",
             "default.embedding", "cohere.rerank", "bedrock.rerank", "default.rerank"}
    assert set(PRE_PROCESS_FUNCTIONS) == {PRE + n for n in names}


PRE_ERRORS = [
    ("embedding-given-similarity", PRE + "openai.embedding", SIMILARITY, "can only support TextDocsInputDataSet"),
    ("rerank-given-docs", PRE + "cohere.rerank", DOCS, "can only support TextSimilarityInputDataSet"),
    ("bedrock-rerank-given-docs", PRE + "bedrock.rerank", DOCS, "can only support TextSimilarityInputDataSet"),
    ("multimodal-nothing", PRE + "bedrock.multimodal_embedding", TextDocs((None,)), "No input text or image"),
    ("cohere-images-null", PRE + "cohere.multimodal_embedding", TextDocs((None,)), "No image provided"),
    ("similarity-without-function", None, SIMILARITY, "pre_process_function not defined"),
    ("painless-returns-a-list", "return params.text_docs;", DOCS, "Cannot cast [ArrayList] to [String]"),
    ("painless-returns-null", "return null;", DOCS, "Preprocess function output is null"),
    ("painless-returns-not-json", "return 'input: ' + params.text_docs[0];", DOCS, "not JSON"),
]


@pytest.mark.parametrize("function, dataset, message", [c[1:] for c in PRE_ERRORS], ids=[c[0] for c in PRE_ERRORS])
def test_pre_process_refused(function: str | None, dataset: Any, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        pre_process(function, dataset)
    assert message in caught.value.reason


# ------------------------------------------------------------------ chunking
# ml-algorithms/.../remote/RemoteConnectorExecutor.java calculateChunkSize

CHUNKS = [
    ("default-one-request", None, {}, 5, 5),
    ("openai-one-request", PRE + "openai.embedding", {}, 5, 5),
    ("bedrock-one-per-doc", PRE + "bedrock.embedding", {}, 5, 1),
    ("step-size-wins", PRE + "bedrock.embedding", {"input_docs_processed_step_size": 2}, 5, 2),
    ("step-size-as-text", PRE + "openai.embedding", {"input_docs_processed_step_size": "3"}, 5, 3),
]


@pytest.mark.parametrize("function, parameters, docs, expected", [c[1:] for c in CHUNKS], ids=[c[0] for c in CHUNKS])
def test_chunk_size(function: str | None, parameters: dict[str, Any], docs: int, expected: int) -> None:
    assert chunk_size(function, parameters, docs) == expected


@pytest.mark.parametrize("step", [0, -1, "x", True])
def test_chunk_size_refuses_bad_step(step: Any) -> None:
    with pytest.raises(BadRequest, match="input_docs_processed_step_size"):
        chunk_size(None, {"input_docs_processed_step_size": step}, 3)


def test_split_keeps_order_and_the_tail() -> None:
    docs = TextDocs(tuple("abcde"))
    assert split_dataset(docs, 2) == [TextDocs(("a", "b")), TextDocs(("c", "d")), TextDocs(("e",))]
    assert split_dataset(SIMILARITY, 1) == [SIMILARITY]
    assert split_dataset(None, 1) == [None]


# ------------------------------------------------------------------ post-process functions
# connector/MLPostProcessFunction.java (names and default paths) and
# connector/functions/postprocess/*.java (the tensors)

POST = "connector.post_process."


def emb(data: list[Any], data_type: str = "FLOAT32") -> dict[str, Any]:
    return {"name": "sentence_embedding", "data_type": data_type, "shape": [len(data)], "data": data}


def sim(score: float) -> dict[str, Any]:
    return {"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [score]}


OPENAI_ANSWER = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
                                            {"object": "embedding", "index": 1, "embedding": [1, 0.0]}]}
COHERE_V2 = {"embeddings": {"float": [[0.5, 0.5]], "int8": [[12, -3]], "uint8": [[200, 7]],
                            "binary": [[-5]], "ubinary": [[123]]}}
POST_CASES = [
    # EmbeddingPostProcessFunction.java via $.data[*].embedding
    ("openai", POST + "openai.embedding", OPENAI_ANSWER, None, [emb([0.5, -0.25]), emb([1, 0.0])]),
    ("cohere", POST + "cohere.embedding", {"embeddings": [[0.1, 0.2, 0.3]]}, None, [emb([0.1, 0.2, 0.3])]),
    ("cohere-v2-float", POST + "cohere_v2.embedding.float", COHERE_V2, None, [emb([0.5, 0.5])]),
    # ConnectorUtils.java parseMLResultDataTypeFromResponseFilter: the type from the path's suffix
    ("cohere-v2-int8", POST + "cohere_v2.embedding.int8", COHERE_V2, None, [emb([12, -3], "INT8")]),
    ("cohere-v2-uint8", POST + "cohere_v2.embedding.uint8", COHERE_V2, None, [emb([200, 7], "UINT8")]),
    ("cohere-v2-binary", POST + "cohere_v2.embedding.binary", COHERE_V2, None, [emb([-5], "BINARY")]),
    ("cohere-v2-ubinary", POST + "cohere_v2.embedding.ubinary", COHERE_V2, None, [emb([123], "UBINARY")]),
    ("default", POST + "default.embedding", [[1.5], [2.5]], None, [emb([1.5]), emb([2.5])]),
    # BedrockEmbeddingPostProcessFunction.java: one vector
    ("bedrock", POST + "bedrock.embedding", {"embedding": [0.1, 0.2], "inputTextTokenCount": 2}, None,
     [emb([0.1, 0.2])]),
    ("bedrock-v2-float", POST + "bedrock_v2.embedding.float", {"embeddingsByType": {"float": [0.3]}}, None,
     [emb([0.3])]),
    ("bedrock-v2-binary", POST + "bedrock_v2.embedding.binary", {"embeddingsByType": {"binary": [1, 0]}}, None,
     [emb([1, 0], "BINARY")]),
    ("nova", POST + "bedrock.nova.embedding",
     {"embeddings": [{"embeddingType": "TEXT", "embedding": [0.7, 0.8]}]}, None, [emb([0.7, 0.8])]),
    # ConnectorUtils.java processOutput: a request's response_filter replaces the default path
    ("filter-replaces-default", POST + "openai.embedding", {"vectors": {"int8": [[1, 2]]}}, "$.vectors.int8",
     [emb([1, 2], "INT8")]),
    ("blank-filter-ignored", POST + "cohere.embedding", {"embeddings": [[0.1]]}, "  ", [emb([0.1])]),
    # CohereRerankPostProcessFunction.java: scores back in document order
    ("cohere-rerank", POST + "cohere.rerank",
     {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]}, None,
     [sim(0.1), sim(0.9)]),
    ("default-rerank", POST + "default.rerank",
     [{"index": 0, "relevance_score": 1}, {"index": 1, "relevance_score": 0.5}], None, [sim(1.0), sim(0.5)]),
    # BedrockRerankPostProcessFunction.java
    ("bedrock-rerank", POST + "bedrock.rerank",
     {"results": [{"index": 2, "relevanceScore": 0.7}, {"index": 0, "relevanceScore": 0.2},
                  {"index": 1, "relevanceScore": 0.1}]}, None, [sim(0.2), sim(0.1), sim(0.7)]),
    # RemoteMlCommonsPassthroughPostProcessFunction.java
    ("passthrough-tensors", POST + "mlcommons.passthrough",
     {"inference_results": [{"output": [{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [2],
                                         "data": [0.1, 0.2]}], "status_code": 200}]}, None,
     [emb([0.1, 0.2])]),
    ("passthrough-sparse", POST + "mlcommons.passthrough",
     {"inference_results": [{"output": [{"name": "output", "dataAsMap": {"response": [{"fox": 0.5}]}}]}]}, None,
     [{"name": "output", "dataAsMap": {"response": [{"fox": 0.5}]}}]),
    ("passthrough-other", POST + "mlcommons.passthrough", {"answer": 1}, None,
     [{"name": "response", "dataAsMap": {"answer": 1}}]),
]


@pytest.mark.parametrize("function, answer, response_filter, expected", [c[1:] for c in POST_CASES],
                         ids=[c[0] for c in POST_CASES])
def test_post_process(function: str, answer: Any, response_filter: str | None, expected: list[Any]) -> None:
    assert post_process(function, answer, response_filter) == expected


def test_every_ml_commons_post_process_name_is_built_in() -> None:
    # the constants of connector/MLPostProcessFunction.java (batch_job_arn: _batch_predict's)
    names = {"cohere.embedding", "openai.embedding", "bedrock.embedding", "bedrock.nova.embedding",
             "cohere.rerank", "bedrock.rerank", "default.embedding", "default.rerank", "mlcommons.passthrough",
             "bedrock.batch_job_arn",
             *(f"cohere_v2.embedding.{t}" for t in ("float", "int8", "uint8", "binary", "ubinary")),
             *(f"bedrock_v2.embedding.{t}" for t in ("float", "binary"))}
    assert set(POST_PROCESS_FUNCTIONS) == {POST + n for n in names}


POST_ERRORS = [
    ("openai-not-vectors", POST + "openai.embedding", {"data": [{"embedding": "abc"}]}, None, UpstreamError),
    ("bedrock-not-list", POST + "bedrock.embedding", {"embedding": {"a": 1}}, None, UpstreamError),
    # the provider's answer is not what the function reads: the provider's fault, 502
    ("default-path-missing", POST + "bedrock.embedding", {"vector": [1]}, None, UpstreamError),
    ("blank-filter-path-missing", POST + "bedrock.embedding", {"vector": [1]}, " ", UpstreamError),
    # the request's own filter matching nothing: the request's fault, 400
    ("filter-missing", POST + "bedrock.embedding", {"vector": [1]}, "$.embedding", BadRequest),
    ("rerank-missing-score", POST + "cohere.rerank", {"results": [{"index": 0}]}, None, UpstreamError),
    ("rerank-partial", POST + "cohere.rerank",
     {"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]}, None, UpstreamError),
    ("bedrock-rerank-empty", POST + "bedrock.rerank", {"results": []}, None, UpstreamError),
    ("passthrough-scalar", POST + "mlcommons.passthrough", 3, None, UpstreamError),
]


@pytest.mark.parametrize("function, answer, response_filter, error", [c[1:] for c in POST_ERRORS],
                         ids=[c[0] for c in POST_ERRORS])
def test_post_process_refused(function: str, answer: Any, response_filter: str | None, error: type) -> None:
    with pytest.raises(error):
        post_process(function, answer, response_filter)


DATA_TYPES = [
    ("$.embeddings.float", None), ("$.embeddings.int8", "INT8"), ("$.embeddings.uint8", "UINT8"),
    ("$.embeddings.binary", "BINARY"), ("$.embeddings.ubinary", "UBINARY"), ("$.x.FLOAT16", "FLOAT16"),
    ("$.data[*].embedding", None), ("$.Int8", "INT8"),
]


@pytest.mark.parametrize("path, expected", DATA_TYPES)
def test_data_type_from_filter(path: str, expected: str | None) -> None:
    assert data_type_from_filter(path) == expected


# ------------------------------------------------------------------ names at connector creation

@pytest.mark.parametrize("field, name, message", [
    ("pre_process_function", "return params.text_docs)", "Painless syntax error at line 1, column 24: expected ';'"),
    ("post_process_function", "def x = params['embedding'];\n return y;", "line 2, column 9: cannot resolve symbol [y]"),
    ("post_process_function", "params.x.forEach(v -> v)", "line 1, column 20: lambda"),
    ("pre_process_function", "connector.pre_process.openai.embeddings", "not a built-in function"),
    ("post_process_function", "connector.post_process.bedrock.embedding.float", "not a built-in function"),
    ("pre_process_function", "${parameters.pre} +", "Painless syntax error"),
])
def test_check_function_name_refuses(field: str, name: str, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        processing.check_function_name(field, name)
    assert message in caught.value.reason and field in caught.value.reason


def test_check_function_name_accepts_built_ins() -> None:
    for name in PRE_PROCESS_FUNCTIONS:
        processing.check_function_name("actions[0].pre_process_function", name)
    for name in POST_PROCESS_FUNCTIONS:
        processing.check_function_name("actions[0].post_process_function", name)
    processing.check_function_name("actions[0].post_process_function", None)


def test_the_painless_interpreter_is_loaded_only_when_a_script_is_compiled() -> None:
    """About 4 MB of resident memory that a server with no script connector never needs."""
    import subprocess
    import sys

    probe = ("import sys, mlstream.app.cli, mlstream.app.compose, mlstream.processing.scripts as p\n"
             "before = any(name.startswith('mlstream.painless') for name in sys.modules)\n"
             "p.compile_script('return 1')\n"
             "print(before, 'mlstream.painless' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True"]


# ------------------------------------------------------------------ a script over plain parameters
# ml-algorithms/.../remote/ConnectorUtils.java processMLInput: a script pre-processes a
# `parameters` body only when pre_process_function.process_remote_inference_input is true
# (Boolean.parseBoolean); connector/functions/preprocess/RemoteInferencePreProcessFunction.java:
# the script's params are the request's parameters, as text, escaped before it runs
# (RemoteConnectorExecutor.executeAction); with convert_remote_inference_param_to_object
# JSON object or array text is read into Maps and Lists, every number a Double.

REMOTE_INPUT = PROCESS_REMOTE_INFERENCE_INPUT
AS_OBJECTS = CONVERT_PARAMETERS_TO_OBJECTS
# A prompt turned into chat messages: the question quoted into JSON as it arrives.
TO_MESSAGES = """
    def content = 'Answer briefly: ' + params.question;
    return '{"parameters": {"messages": [{"role": "user", "content": "' + content + '"}]}}';
"""
# Each parameter's value as the script sees it, joined by '|'.
SEEN = "return '{\"parameters\": {\"seen\": \"' + params.n + '|' + params.none + '|' + params.yes + '|' + " \
       "params.big + '\", \"obj\": ' + params.obj + '}}';"
VALUES = {"n": 3, "obj": {"a": [1, 2.5]}, "none": None, "yes": True, "big": 1e20}
QUESTION = {"question": 'Is "x" \\ y?\n'}

REMOTE_INPUT_CASES = [
    ("escaped-text-quoted-into-json", TO_MESSAGES, QUESTION, {REMOTE_INPUT: "true"},
     {"messages": json.dumps([{"role": "user", "content": 'Answer briefly: Is "x" \\ y?\n'}],
                             separators=(",", ":"))}),
    ("parse-boolean-ignores-case", TO_MESSAGES, {"question": "q"}, {REMOTE_INPUT: "TRUE"},
     {"messages": '[{"role":"user","content":"Answer briefly: q"}]'}),
    ("a-json-true-is-true", TO_MESSAGES, {"question": "q"}, {REMOTE_INPUT: True},
     {"messages": '[{"role":"user","content":"Answer briefly: q"}]'}),
    ("absent-passes-through", TO_MESSAGES, QUESTION, {}, {}),
    ("false-passes-through", TO_MESSAGES, QUESTION, {REMOTE_INPUT: "false"}, {}),
    ("not-a-boolean-is-false", TO_MESSAGES, QUESTION, {REMOTE_INPUT: "yes"}, {}),
    ("built-in-function-passes-through", PRE + "openai.embedding", QUESTION, {REMOTE_INPUT: "true"}, {}),
    ("values-as-their-json-text", SEEN, VALUES, {REMOTE_INPUT: "true"},
     {"seen": "3|null|true|1.0E20", "obj": '{"a":[1.0,2.5]}'}),
    ("json-text-read-as-objects", ("return '{\"parameters\": {\"half\": ' + params.obj.a[0] / 2 + ', "
                                   "\"n\": \"' + params.n + '\"}}';"), VALUES, {REMOTE_INPUT: "true", AS_OBJECTS: "true"},
     {"half": "0.5", "n": "3"}),
    ("json-text-stays-text-without-the-flag", "return '{\"parameters\": {\"len\": ' + params.obj.length() + '}}';",
     VALUES, {REMOTE_INPUT: "true"}, {"len": "13.0"}),
    ("output-values-as-gson-text", "return '{\"parameters\": {\"k\": 1, \"m\": {\"x\": [2]}, \"s\": \"t\"}}';",
     {}, {REMOTE_INPUT: "true"}, {"k": "1.0", "m": '{"x":[2.0]}', "s": "t"}),
    # "banana" hashes to bucket 0, "cherry" and "apple" to bucket 1 (put in that order), in a
    # table of 4 (putAll of 3) as in one of 16 (each put): java.util.HashMap's order
    ("params-iterate-as-a-hashmap", ("def s = ''; for (def k : params.keySet()) { s += k + ','; } "
                                     "return '{\"parameters\": {\"keys\": \"' + s + '\"}}';"),
     {"cherry": "c", "apple": "a", "banana": "b"}, {REMOTE_INPUT: "true"}, {"keys": "banana,cherry,apple,"}),
    ("params-iterate-as-a-hashmap-as-objects", ("def s = ''; for (def k : params.keySet()) { s += k + ','; } "
                                                "return '{\"parameters\": {\"keys\": \"' + s + '\"}}';"),
     {"cherry": "c", "apple": "a", "banana": "b"}, {REMOTE_INPUT: "true", AS_OBJECTS: "true"},
     {"keys": "banana,cherry,apple,"}),
    ("connector-parameter-filled-in", "return '{\"parameters\": {\"m\": \"' + ${parameters.model} + '\"}}';",
     {}, {REMOTE_INPUT: "true", "model": "gpt-x"}, {"m": "gpt-x"}),
]


@pytest.mark.parametrize("function, request_parameters, flags, expected", [c[1:] for c in REMOTE_INPUT_CASES],
                         ids=[c[0] for c in REMOTE_INPUT_CASES])
def test_pre_process_remote_input(function: str, request_parameters: dict[str, Any], flags: dict[str, Any],
                                  expected: dict[str, Any]) -> None:
    escaped = escape_input_parameters(request_parameters)
    assert pre_process(function, None, {**flags, **escaped}, escaped) == expected


REMOTE_INPUT_ERRORS = [
    ("returns-null", "return null;", {}, "Preprocess function output is null"),
    ("returns-not-json", "return 'messages: ' + params.question;", QUESTION, "not JSON"),
    ("throws", "throw new IllegalArgumentException('no ' + params.question);", {"question": "q"},
     "Painless runtime error at line 1: IllegalArgumentException: no q"),
    ("parameters-not-an-object", "return '{\"parameters\": [1]}';", {}, "with an object"),
    ("nested-too-deeply", TO_MESSAGES, {"question": json.loads("[" * 900 + "]" * 900)}, "nested too deeply"),
]


@pytest.mark.parametrize("function, request_parameters, message", [c[1:] for c in REMOTE_INPUT_ERRORS],
                         ids=[c[0] for c in REMOTE_INPUT_ERRORS])
def test_pre_process_remote_input_refused(function: str, request_parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        pre_process(function, None, {REMOTE_INPUT: "true", **request_parameters}, request_parameters)
    assert message in caught.value.reason and caught.value.http_status == 400


def test_deeply_nested_text_is_not_taken_for_json() -> None:
    # escapeRemoteInferenceInputData: text no parser follows to its end is escaped as text
    assert escape_input_parameters({"x": "[" * 100_000 + '"'}) == {"x": "[" * 100_000 + '\\"'}


# ------------------------------------------------------------------ convert_input_to_json_string
# ml-algorithms/.../remote/ConnectorUtils.java processMLInput reads
# pre_process_function.convert_input_to_json_string (Boolean.parseBoolean) for a script over
# text_docs; DefaultPreProcessFunction then gives the script convertScriptStringToJsonString
# of the input: a new HashMap, each value a String, any other its Gson text.

def _java_bucket(name: str, table: int) -> int:
    h = 0
    for unit in name.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (table - 1)


def test_convert_input_to_json_string_gives_the_script_text() -> None:
    script = ("def keys = ''; for (def k : params.keySet()) { keys += k + ' '; } "
              "return '{\"parameters\": {\"docs\": \"' + escape(params.text_docs) + '\", \"string\": \"' "
              "+ (params.text_docs instanceof String) + '\", \"query\": \"' + params.query_text + '\", "
              "\"keys\": \"' + keys.trim() + '\"}}';")
    flag = {CONVERT_INPUT_TO_JSON_STRING: "true"}
    out = pre_process(script, TextSimilarity("q", ('a "b"', None)), flag)
    # the documents are escaped (escapeMLInput), then the list is written as Gson writes it
    assert json.loads(out["docs"]) == ['a \\"b\\"', None]
    assert out["string"] == "true" and out["query"] == "q"
    names = ["algorithm", "query_text", "text_docs"]
    assert out["keys"].split() == sorted(names, key=lambda n: _java_bucket(n, 16))
    without = pre_process("return '{\"parameters\": {\"string\": \"' + (params.text_docs instanceof String) + '\"}}';",
                          TextDocs(("a",)), {CONVERT_INPUT_TO_JSON_STRING: "false"})
    assert without == {"string": "false"}
