"""The Painless subset under test from the outside: a fuzz grammar, small budgets, and
post-process scripts in the style of ml-commons' blueprints with their answers."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from mlstream.painless import Limits
from mlstream.testing.painless_scripts import (
    CLAUDE_JUDGMENT_POST,
    CROSS_ENCODER_POST,
    DEEPSEEK_POST,
    GUARDRAIL_POST,
    JUDGMENT_POST,
    QUANTIZED_POST,
    RERANK_POST,
    TEXT_POST,
    TITAN_EMBEDDING_POST,
)

# Budgets small enough that a fuzzed script reaches them quickly.
SMALL = Limits(max_steps=2_000, max_string_chars=10_000, max_allocated=50_000, max_call_depth=8)

# Fragments of the language: joined at random they make mostly-almost-valid scripts.
FRAGMENTS = [
    "def ", "int ", "String ", "double ", "long ", "List ", "Map ", "StringBuilder ", "def[] ", "x", "y", "i",
    "params", ".", "?.", "length", "size()", "text_docs", "[0]", "[", "]", "[:]", "(", ")", "{", "}", ";", ",",
    "=", "+=", "++", "--", "+", "-", "*", "/", "%", "<<", ">>>", "&", "|", "^", "&&", "||", "!", "~", "==",
    "!=", "===", "<", ">=", "?", ":", "?:", "if ", "else ", "for ", "while ", "do ", "return ", "break",
    "continue", "throw ", "new ", "instanceof ", "true", "false", "null", "0", "1", "2147483647", "1L", "0.5",
    "1e-4", "3f", "0x1F", "'a'", '"b\\""', "'\\\\'", "append(", "toString()", "substring(", "replace(",
    "indexOf(", "Math.max(", "Integer.parseInt(", "new ArrayList()", "new HashMap()", "new StringBuilder()",
    "new Double[2]", "new BigDecimal(", "escape(", "String f(def a) { return a; }", "// c\n", "/* c */",
    "\n", " ", "x = x + x", "while (true) {", "for (def v : params.v) {", "->", "::", "=~",
]


PARAMS = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


EXPRESSIONS = st.sampled_from([
    "params.x", "params.v", "params.v[0]", "params.v.length", "params.x + params.y", "params.x * 2",
    "params.x / params.y", "params.x % params.y", "params.x == params.y", "params.x < params.y",
    "params.x << params.y", "-params.x", "(int) params.x", "(long) params.x", "(double) params.x",
    "(float) params.x", "params.x.toString()", "params.x.intValue()", "params.v.size()", "params.v.get(params.x)",
    "params.x ?: params.y", "params.x ? 1 : 2", "!params.x", "params.x.length()", "params.x.substring(params.y)",
    "params.x.replace(params.y, params.x)", "escape(params.x)", "String.valueOf(params.v)", "Math.max(params.x, params.y)",
    "Math.round(params.x)", "Integer.parseInt(params.x)", "Double.parseDouble(params.x)", "params.x.split(params.y)",
    "new BigDecimal(params.x)", "new StringBuilder(params.x)", "params.v.indexOf(params.x)", "params.x instanceof String",
    "params.v[params.x]", "params.m[params.x]", "params.m.keySet()", "String.join(params.x, params.v)",
])


# ------------------------------------------------------------------ post-process

def similarity_tensor(score: float) -> dict[str, Any]:
    return {"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [score]}


def response_map(key: str, text: str) -> dict[str, Any]:
    return {"name": "response", "dataAsMap": {key: text}}


# (document, case, script, the provider's answer, the expected tensors)
POST_CASES: list[tuple[str, str, str, Any, Any]] = [
    ("bedrock_connector_titan_embedding_blueprint.md", "embedding", TITAN_EMBEDDING_POST,
     {"embedding": [0.5, -0.0001, 2], "inputTextTokenCount": 3},
     [{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [3], "data": [0.5, -0.0001, 2]}]),
    ("bedrock_connector_titan_embedding_blueprint.md", "error-message-passed-on", TITAN_EMBEDDING_POST,
     {"message": "Malformed input request"}, [response_map("response", "Malformed input request")]),
    ("bedrock_connector_titan_multimodal_embedding_blueprint.md", "script-returns-null",
     TITAN_EMBEDDING_POST.replace("return params.message;", "return null;"), {"embedding": []}, None),
    ("rerank_pipeline_with_Amazon_Rerank_model_on_Amazon_Bedrock.md", "scores-back-in-document-order",
     RERANK_POST, {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 1e-05}]},
     [similarity_tensor(1e-05), similarity_tensor(0.9)]),
    ("rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md", "array-answer-is-result", CROSS_ENCODER_POST,
     [{"score": 0.25}, {"score": 3}], [similarity_tensor(0.25), similarity_tensor(3)]),
    ("rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md", "plain-text-answer", CROSS_ENCODER_POST,
     {"other": 1}, [response_map("response", "no result generated")]),
    ("llm_judgment/deepseek_chat_blueprint.md", "escape-helper", JUDGMENT_POST,
     {"choices": [{"message": {"content": 'Rating: "4"\nReason: fine\r'}}]},
     [response_map("response", 'Rating: "4"\nReason: fine\r')]),
    ("llm_judgment/anthropic_claude_bedrock_blueprint.md", "escape-backslash", CLAUDE_JUDGMENT_POST,
     {"content": [{"type": "text", "text": "C:\\dir \\u00e9"}]}, [response_map("response", "C:\\dir \\u00e9")]),
    ("RAG_with_DeepSeek_R1_model_on_Sagemaker.md", "completion", DEEPSEEK_POST,
     [{"generated_text": "<think>ok</think> answer"}], [response_map("completion", "<think>ok</think> answer")]),
    ("semantic_search_with_byte_quantized_vector.md", "int8", QUANTIZED_POST,
     {"embeddings": {"int8": [[1, -2], [127, 0]]}},
     [{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [2], "data": [1, -2]},
      {"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [2], "data": [127, 0]}]),
    ("semantic_search_with_byte_quantized_vector.md", "float-values-print-as-float", QUANTIZED_POST,
     {"embeddings": {"float": [[0.1, 1e-4, 3.3333333333]]}},
     [{"name": "sentence_embedding", "data_type": "FLOAT32", "shape": [3], "data": [0.1, 0.0001, 3.3333333]}]),
    ("bedrock_connector_ai21labs_jurassic_blueprint.md", "plain-text", TEXT_POST,
     {"completions": [{"data": {"text": "Hello there"}}]}, [response_map("response", "Hello there")]),
    ("use_bedrock_guardrails.md", "not-intervened-is-null", GUARDRAIL_POST,
     {"amazon-bedrock-guardrailAction": "NONE"}, None),
]
