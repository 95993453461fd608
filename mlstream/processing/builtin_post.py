"""ml-commons' built-in post-process functions, by name: each reads the provider's answer
at its response filter and turns it into model tensors (``connector/MLPostProcessFunction.java``,
``connector/functions/postprocess/*``, under ``common/src/main/java/org/opensearch/ml/common/``);
the tensor data type comes from the filter (``ConnectorUtils.parseMLResultDataTypeFromResponseFilter``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BadRequest, JsonPathError, PathNotFound, UpstreamError
from ..wire.jsonpath import compile_path
from .tensors import DATA_TYPES, Tensor, data_type_from_filter, is_number

PostProcess = Callable[[Any, str | None], list[Tensor]]


def _tensor(name: str, data_type: str, data: list[Any]) -> Tensor:
    return {"name": name, "data_type": data_type, "shape": [len(data)], "data": data}


def _embeddings(value: Any, data_type: str | None) -> list[Tensor]:
    # EmbeddingPostProcessFunction.java: a list of vectors, one sentence_embedding each
    if not isinstance(value, list):
        raise _post_error("Post process function input is not a List.")
    if value:
        first = value[0]
        if not isinstance(first, list):
            raise _post_error("The embedding should be a non-empty List containing List of Float values.")
        if not first or not is_number(first[0]):
            raise _post_error("The embedding should be a non-empty List containing Float values.")
    kind = data_type or "FLOAT32"
    return [_tensor("sentence_embedding", kind, vector) for vector in value]


def _bedrock_embedding_output(value: Any, data_type: str | None) -> list[Tensor]:
    # BedrockEmbeddingPostProcessFunction.java: one vector
    if not isinstance(value, list):
        raise _post_error("Post process function input is not a List.")
    if value and not is_number(value[0]):
        raise _post_error("The embedding should be a non-empty List containing Float values.")
    return [_tensor("sentence_embedding", data_type or "FLOAT32", value)]


def _similarities(value: Any, score_key: str) -> list[Tensor]:
    # CohereRerankPostProcessFunction.java / BedrockRerankPostProcessFunction.java: one
    # "similarity" tensor per document, back in the order the documents were sent.
    if not isinstance(value, list):
        raise _post_error("Post process function input is not a List.")
    scores: list[Any] = [None] * len(value)
    for result in value:
        if not isinstance(result, dict) or "index" not in result or score_key not in result:
            raise _post_error(f"The rerank result should contain index and {score_key}.")
        index, score = result["index"], result[score_key]
        if type(index) is not int or not 0 <= index < len(value) or not is_number(score):
            raise _post_error(f"The rerank result has a bad index or {score_key}: {index!r}")
        scores[index] = float(score)
    if any(score is None for score in scores):
        raise _post_error("The rerank results do not cover every document once: send top_n / "
                          "numberOfResults equal to the number of documents")
    return [{"name": "similarity", "data_type": "FLOAT32", "shape": [1], "data": [score]}
            for score in scores]


def _cohere_rerank_output(value: Any, data_type: str | None) -> list[Tensor]:
    return _similarities(value, "relevance_score")


def _bedrock_rerank_output(value: Any, data_type: str | None) -> list[Tensor]:
    if isinstance(value, list) and not value:
        raise _post_error("Post process function input is empty.")
    return _similarities(value, "relevanceScore")


def _passthrough(value: Any, data_type: str | None) -> list[Tensor]:
    # RemoteMlCommonsPassthroughPostProcessFunction.java: a remote ml-commons answer's
    # tensors, unwrapped; anything else is one "response" tensor.
    if not isinstance(value, (dict, list)):
        raise _post_error("Post process function input must be a Map or List")
    if isinstance(value, dict) and isinstance(value.get("inference_results"), list):
        tensors: list[Tensor] = []
        for result in value["inference_results"]:
            if not isinstance(result, dict) or not isinstance(result.get("output"), list):
                continue
            for output in result["output"]:
                if isinstance(output, dict) and output:
                    tensors.append(_tensor_from_map(output))
        return tensors
    return [{"name": "response", "dataAsMap": value}]



def _bedrock_batch_job_arn(value: Any, data_type: str | None) -> list[Tensor]:
    # BedrockBatchJobArnPostProcessFunction.java: CreateModelInvocationJob's answer, with
    # the ARN's "/" written %2F as processedJobArn, the one path segment the status and
    # stop URLs take.
    if not isinstance(value, dict):
        raise _post_error("Post process function input is not a Map.")
    if "jobArn" not in value:
        raise _post_error("job arn is missing.")
    return [{"name": "response", "dataAsMap": {**value, "processedJobArn": str(value["jobArn"]).replace("/", "%2F")}}]

def _tensor_from_map(output: Mapping[str, Any]) -> Tensor:
    name = output.get("name")
    tensor: Tensor = {"name": name if isinstance(name, str) else "output"}
    data_type = output.get("data_type")
    if isinstance(data_type, str) and data_type in DATA_TYPES:
        tensor["data_type"] = data_type
    for key in ("shape", "data"):
        value = output.get(key)
        if isinstance(value, list) and all(is_number(v) for v in value):
            tensor[key] = [int(v) for v in value] if key == "shape" else value
    if isinstance(output.get("result"), str):
        tensor["result"] = output["result"]
    if isinstance(output.get("dataAsMap"), dict):
        tensor["dataAsMap"] = output["dataAsMap"]
    return tensor


def _post_error(reason: str) -> UpstreamError:
    return UpstreamError(f"post_process_function cannot read the model's answer: {reason}")


_POST = "connector.post_process."
# name -> (the function, the response filter it reads when the request gives none)
POST_PROCESS_FUNCTIONS: Mapping[str, tuple[PostProcess, str]] = {
    _POST + "openai.embedding": (_embeddings, "$.data[*].embedding"),
    _POST + "cohere.embedding": (_embeddings, "$.embeddings"),
    _POST + "cohere_v2.embedding.float": (_embeddings, "$.embeddings.float"),
    _POST + "cohere_v2.embedding.int8": (_embeddings, "$.embeddings.int8"),
    _POST + "cohere_v2.embedding.uint8": (_embeddings, "$.embeddings.uint8"),
    _POST + "cohere_v2.embedding.binary": (_embeddings, "$.embeddings.binary"),
    _POST + "cohere_v2.embedding.ubinary": (_embeddings, "$.embeddings.ubinary"),
    _POST + "default.embedding": (_embeddings, "$[*]"),
    _POST + "bedrock.embedding": (_bedrock_embedding_output, "$.embedding"),
    _POST + "bedrock_v2.embedding.float": (_bedrock_embedding_output, "$.embeddingsByType.float"),
    _POST + "bedrock_v2.embedding.binary": (_bedrock_embedding_output, "$.embeddingsByType.binary"),
    _POST + "bedrock.nova.embedding": (_embeddings, "$.embeddings[*].embedding"),
    _POST + "cohere.rerank": (_cohere_rerank_output, "$.results"),
    _POST + "bedrock.rerank": (_bedrock_rerank_output, "$.results"),
    _POST + "default.rerank": (_cohere_rerank_output, "$[*]"),
    _POST + "mlcommons.passthrough": (_passthrough, "$"),
    _POST + "bedrock.batch_job_arn": (_bedrock_batch_job_arn, "$"),
}


def check_response_filter(response_filter: Any) -> None:
    """A request's ``response_filter``, checked before the provider is called: absent,
    blank (the function's own path, or the whole answer), or a valid JSONPath string."""
    if response_filter is None:
        return
    if not isinstance(response_filter, str):
        raise BadRequest("[response_filter] must be a JSONPath string")
    if response_filter.strip():
        try:
            compile_path(response_filter)
        except JsonPathError as error:
            raise JsonPathError(f"[response_filter] {error.reason}") from None


def post_process(function: str, answer: Any, response_filter: Any) -> list[Tensor]:
    """The tensors a built-in post-process function makes of the provider's parsed answer.
    A non-blank ``response_filter`` replaces the function's own path."""
    process, default_filter = POST_PROCESS_FUNCTIONS[function]
    if response_filter is not None and not isinstance(response_filter, str):
        raise BadRequest("[response_filter] must be a JSONPath string")
    given = bool(response_filter and response_filter.strip())
    path = response_filter if given else default_filter
    try:
        value = compile_path(path).read(answer)
    except PathNotFound:
        if given:  # the request's own filter
            raise BadRequest(f"[response_filter] {path} matches nothing in the provider's answer") from None
        raise _post_error(f"the answer has nothing at {path}, where {function} reads it") from None
    if value is None:
        raise _post_error("Can't run post process function as model output is null")
    return process(value, data_type_from_filter(path))
