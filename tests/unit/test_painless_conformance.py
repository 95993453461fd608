"""Scripts in each style of the published process functions, run where ml-commons runs them.

Every case names the ml-commons document (under ``docs/`` in opensearch-project/ml-commons)
whose script's constructs it mirrors; the scripts here are our own, written the way those
are. Inputs are shaped as each provider answers, and expected outputs follow Painless
semantics plus ml-commons' contract: a pre-process script sees ``text_docs`` (and
``query_text``) JSON-escaped and returns ``{"parameters": {...}}`` whose non-string values
become JSON text with Gson's doubles; a post-process script sees the answer (an array
under ``result``) and returns one tensor, a list of tensors, other text, or null.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.errors import BadRequest, ScriptError
from mlstream.processing import (
    TextDocs,
    TextSimilarity,
    chunk_size,
    escape_input_parameters,
    post_process_script,
    pre_process,
)
from mlstream.testing.painless_scripts import (
    CROSS_ENCODER_PRE,
    DEEPSEEK_POST,
    GUARDRAIL_POST,
    JUDGMENT_POST,
    MULTIMODAL_PRE,
    RERANK_POST,
    RERANK_PRE,
    TEXT_POST,
    TITAN_EMBEDDING_PRE,
    TYPED_PARAMETERS_PRE,
)

from ..support.painless import POST_CASES, response_map

# ------------------------------------------------------------------ pre-process

PRE_CASES: list[tuple[str, str, str, Any, dict[str, Any]]] = [
    ("bedrock_connector_titan_embedding_blueprint.md", "quote-first-doc", TITAN_EMBEDDING_PRE,
     TextDocs(('He said "hi"',)), {"inputText": 'He said "hi"'}),
    ("aleph_alpha_connector_luminous_base_embedding_blueprint.md", "backslash-and-newline", TITAN_EMBEDDING_PRE,
     TextDocs(("a\\b\nc",)), {"inputText": "a\\b\nc"}),
    ("bedrock_connector_titan_multimodal_embedding_blueprint.md", "text-only", MULTIMODAL_PRE,
     TextDocs(("a cat",)), {"inputText": "a cat"}),
    ("bedrock_connector_titan_multimodal_embedding_blueprint.md", "text-and-image", MULTIMODAL_PRE,
     TextDocs(("a cat", "aGVsbG8=")), {"inputText": "a cat", "inputImage": "aGVsbG8="}),
    ("bedrock_connector_titan_multimodal_embedding_blueprint.md", "image-only", MULTIMODAL_PRE,
     TextDocs((None, "aGVsbG8=")), {"inputImage": "aGVsbG8="}),
    ("rerank_pipeline_with_Cohere_Rerank_model_on_Amazon_Bedrock.md", "documents-array", RERANK_PRE,
     TextSimilarity('what is "x"?', ("first", 'second "quoted"')),
     {"query": 'what is "x"?', "documents": '["first","second \\"quoted\\""]'}),
    ("rerank_pipeline_with_CrossEncoder_model_deployed_on_Sagemaker.md", "declared-escape", CROSS_ENCODER_PRE,
     TextSimilarity("q", ("d1", "d2")),
     {"inputs": '[{"text":"q","text_pair":"d1"},{"text":"q","text_pair":"d2"}]'}),
    ("semantic_search_with_byte_quantized_vector.md (Cohere v2 request)", "numbers-become-gson-text",
     TYPED_PARAMETERS_PRE, TextDocs(("t",)),
     {"texts": '["t"]', "count": "1.0", "scale": "1.0E-4", "flag": "true", "truncate": "END"}),
]


@pytest.mark.parametrize("source, dataset, expected", [c[2:] for c in PRE_CASES],
                         ids=[f"{c[0]}:{c[1]}" for c in PRE_CASES])
def test_pre_process_script(source: str, dataset: Any, expected: dict[str, Any]) -> None:
    assert pre_process(source, dataset) == expected


def test_pre_process_output_is_escaped_like_any_parameter() -> None:
    # ConnectorUtils.escapeRemoteInferenceInputData runs on the script's output too
    parameters = escape_input_parameters(pre_process(TITAN_EMBEDDING_PRE, TextDocs(('say "x"',))))
    assert parameters == {"inputText": 'say \\"x\\"'}


def test_a_script_gets_one_document_per_request() -> None:
    # RemoteConnectorExecutor.calculateChunkSize: a user script's chunk is one document
    assert chunk_size(TITAN_EMBEDDING_PRE, {}, 5) == 1


def test_plain_parameters_pass_a_pre_process_script_by() -> None:
    assert pre_process(TITAN_EMBEDDING_PRE, None) == {}


def test_parameters_fill_a_script() -> None:
    source = 'return \'{"parameters": {"model": "\' + ${parameters.model} + \'", "n": \' + ${parameters.n} + \'}}\''
    assert pre_process(source, TextDocs(("x",)), {"model": "m-1", "n": 3}) == {"model": "m-1", "n": "3.0"}


# ------------------------------------------------------------------ post-process


@pytest.mark.parametrize("source, answer, expected", [c[2:] for c in POST_CASES],
                         ids=[f"{c[0]}:{c[1]}" for c in POST_CASES])
def test_post_process_script(source: str, answer: Any, expected: Any) -> None:
    assert post_process_script(source, {}, json.dumps(answer).encode()) == expected


@pytest.mark.parametrize("source, answer, message", [
    (RERANK_POST, {"results": []}, "IllegalArgumentException: Post process function input is empty."),
    (DEEPSEEK_POST, [], "Exception: No response available"),
    (GUARDRAIL_POST, {"amazon-bedrock-guardrailAction": "INTERVENED"},
     "IllegalArgumentException: blocked by the guardrail"),
    (JUDGMENT_POST, {"choices": [{"message": {}}]}, "NullPointerException"),
    ("return '{\"name\": \"x\", \"data_type\": \"FLOAT33\"}'", {}, "unknown data_type [FLOAT33]"),
])
def test_post_process_script_errors(source: str, answer: Any, message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        post_process_script(source, {}, json.dumps(answer).encode())
    assert message in caught.value.reason and caught.value.http_status == 400


def test_a_scalar_answer_is_refused() -> None:
    with pytest.raises(BadRequest, match="Unsupported response type"):
        post_process_script(TEXT_POST, {}, b"42")


def test_json_integers_keep_their_java_type() -> None:
    # Jackson: an Integer, or a Long past 32 bits; int arithmetic wraps, long does not
    source = "return '' + (params.small * 2) + ' ' + (params.big * 2)"
    assert post_process_script(source, {}, b'{"small": 2147483647, "big": 2147483648}') == [
        response_map("response", "-2 4294967296")]
