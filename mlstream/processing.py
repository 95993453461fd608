"""ml-commons' remote-model input shapes and built-in connector process functions.

Pure: no I/O. Each rule follows a named ml-commons source file (paths below are
under ``common/src/main/java/org/opensearch/ml/common/`` unless they say otherwise):

- the ``_predict`` body: ``input/MLInput.java`` and ``input/remote/RemoteInferenceMLInput.java``
  give three shapes: ``parameters`` (a remote call), ``text_docs`` (text embedding),
  ``query_text`` + ``text_docs`` (text similarity, i.e. rerank);
- pre-process functions (``connector/MLPreProcessFunction.java``,
  ``connector/functions/preprocess/*``) turn a dataset into template parameters;
- request-parameter escaping (``ml-algorithms/.../remote/ConnectorUtils.java``,
  ``escapeRemoteInferenceInputData``): a string parameter that is not JSON object or
  array text is JSON-escaped, unless ``no_escape_params`` names it;
- post-process functions (``connector/MLPostProcessFunction.java``,
  ``connector/functions/postprocess/*``) turn the provider's answer into model tensors;
  the tensor data type comes from the response filter (``ConnectorUtils``,
  ``parseMLResultDataTypeFromResponseFilter``);
- chunking of ``text_docs`` (``ml-algorithms/.../remote/RemoteConnectorExecutor.java``,
  ``calculateChunkSize``);
- Painless process functions (any name that is not a built-in one): the pre-process
  script's params and output (``connector/functions/preprocess/DefaultPreProcessFunction.java``,
  ``ConnectorUtils.processMLInput`` and ``escapeMLInput``); over plain ``parameters``, when
  ``pre_process_function.process_remote_inference_input`` is true
  (``connector/functions/preprocess/RemoteInferencePreProcessFunction.java``), the request's
  parameters as the script's params; the post-process script's params
  and how its text becomes tensors (``ml-algorithms/.../utils/ScriptUtils.java``,
  ``ConnectorUtils.processOutput``, ``connector/AbstractConnector.parseResponse``,
  ``output/model/ModelTensor.parser``), ``${parameters.x}`` in a script
  (``ConnectorUtils.fillProcessFunctionParameter``).

A tensor is a plain dict in ml-commons' JSON field order (``ModelTensor.toXContent``):
``name``, ``data_type``, ``shape``, ``data``, then ``dataAsMap``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import BadRequest, JsonPathError, PathNotFound, ScriptError, UpstreamError
from .jsonpath import compile_path
from .speedups import loads_json

if TYPE_CHECKING:  # the interpreter itself is imported on first use (compile_script)
    from .painless import Script
    from .painless.values import LazyText

__all__ = [
    "POST_PROCESS_FUNCTIONS",
    "PRE_PROCESS_FUNCTIONS",
    "PredictInput",
    "TextDocs",
    "TextSimilarity",
    "check_function_name",
    "chunk_size",
    "data_type_from_filter",
    "escape_input_parameters",
    "is_script",
    "parse_predict_input",
    "post_process",
    "post_process_script",
    "pre_process",
]

NO_ESCAPE_PARAMS = "no_escape_params"
# MLPreProcessFunction.PROCESS_REMOTE_INFERENCE_INPUT: a script pre-processes plain parameters too
PROCESS_REMOTE_INFERENCE_INPUT = "pre_process_function.process_remote_inference_input"
# RemoteInferencePreProcessFunction: that script sees JSON object or array text as Maps and Lists
CONVERT_PARAMETERS_TO_OBJECTS = "pre_process_function.convert_remote_inference_param_to_object"
CONVERT_INPUT_TO_JSON_STRING = "pre_process_function.convert_input_to_json_string"
STEP_SIZE_PARAMETER = "input_docs_processed_step_size"
ALGORITHMS = ("remote", "text_embedding", "text_similarity")
# Fields of ml-commons' ModelResultFilter: accepted and, for remote models, not applied
# (RemoteConnectorExecutor rebuilds each chunk's dataset without the filter).
_RESULT_FILTER_FIELDS = frozenset({"return_bytes", "return_number", "target_response",
                                   "target_response_positions"})


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class TextDocs:
    """``text_docs``: documents to embed (``dataset/TextDocsInputDataSet.java``)."""

    docs: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class TextSimilarity:
    """``query_text`` + ``text_docs``: documents to score against a query
    (``dataset/TextSimilarityInputDataSet.java``)."""

    query_text: str
    docs: tuple[str, ...]


Dataset = TextDocs | TextSimilarity


@dataclass(frozen=True, slots=True)
class PredictInput:
    parameters: Mapping[str, Any]
    dataset: Dataset | None     # None: a plain remote call on ``parameters``


def parse_predict_input(body: Any, algorithm: str | None = None) -> PredictInput:
    """The ``_predict`` body of a remote model, for ``algorithm`` (query ``?algorithm=``
    or ``/_predict/{algorithm}/{model_id}``); None lets the body's fields decide."""
    if algorithm is not None:
        algorithm = algorithm.lower()
        if algorithm not in ALGORITHMS:
            raise BadRequest(f"[algorithm] must be one of {', '.join(ALGORITHMS)} for a remote model, "
                             f"got [{algorithm}]")
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object with [parameters], or [text_docs] "
                         "(text embedding), or [query_text] and [text_docs] (text similarity)")
    unknown = sorted(set(body) - {"parameters", "text_docs", "query_text"} - _RESULT_FILTER_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}]: a remote model takes [parameters], "
                         "[text_docs] or [query_text] with [text_docs]")
    parameters = body.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise BadRequest("[parameters] must be a JSON object")
    _check_result_filter(body)
    has_docs, has_query = "text_docs" in body, "query_text" in body
    if algorithm is None:
        algorithm = ("text_similarity" if has_query else "text_embedding") if has_docs else "remote"
    if algorithm == "remote":
        if has_docs or has_query:
            raise BadRequest("[text_docs] and [query_text] need algorithm text_embedding or "
                             "text_similarity; with algorithm remote send [parameters]")
        return PredictInput(parameters, None)
    docs = _text_docs(body, allow_null=algorithm == "text_embedding")
    if algorithm == "text_embedding":
        if has_query:
            raise BadRequest("[query_text] is for text_similarity; text_embedding takes [text_docs]")
        return PredictInput(parameters, TextDocs(docs))
    query = body.get("query_text")
    if not isinstance(query, str):
        raise BadRequest("text_similarity expects [query_text] (a string) and [text_docs]")
    return PredictInput(parameters, TextSimilarity(query, docs))  # type: ignore[arg-type]


def _text_docs(body: Mapping[str, Any], *, allow_null: bool) -> tuple[Any, ...]:
    docs = body.get("text_docs")
    kind = "strings (or null)" if allow_null else "strings"
    if not isinstance(docs, list) or not all(isinstance(d, str) or (allow_null and d is None) for d in docs):
        raise BadRequest(f"[text_docs] must be a list of {kind}")
    if not docs:
        raise BadRequest("[text_docs] must not be empty")
    return tuple(docs)


def _check_result_filter(body: Mapping[str, Any]) -> None:
    for name in ("return_bytes", "return_number"):
        if name in body and not isinstance(body[name], bool):
            raise BadRequest(f"[{name}] must be true or false")
    target = body.get("target_response")
    if target is not None and not (isinstance(target, list) and all(isinstance(t, str) for t in target)):
        raise BadRequest("[target_response] must be a list of strings")
    positions = body.get("target_response_positions")
    if positions is not None and not (isinstance(positions, list)
                                      and all(type(p) is int for p in positions)):
        raise BadRequest("[target_response_positions] must be a list of integers")


# --------------------------------------------------------------------------- escaping


def is_json_container(text: str) -> bool:
    """``StringUtils.isJson``: text that parses as a JSON object or array."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return False
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):  # nested past what a parser follows: not taken as JSON
        return False
    return True


def escape_json_text(text: str) -> str:
    """The text as it goes between the quotes of a JSON string (``"`` ``\\`` and controls
    escaped). ml-commons' escaper also writes ``/`` as ``\\/``: the same JSON value."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def escape_input_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``ConnectorUtils.escapeRemoteInferenceInputData``: each string parameter of a
    request (or of a pre-process function's output) JSON-escaped, so that
    ``"${parameters.x}"`` in a body stays valid JSON whatever ``x`` holds. JSON object or
    array text, non-strings and the names listed in ``no_escape_params`` are kept."""
    raw_names = parameters.get(NO_ESCAPE_PARAMS)
    keep = {n.strip() for n in raw_names.split(",")} if isinstance(raw_names, str) else set()
    escaped: dict[str, Any] = {}
    for name, value in parameters.items():
        if type(value) is str and name not in keep and _needs_escape(value) and not is_json_container(value):
            value = escape_json_text(value)
        escaped[name] = value
    return escaped


_ESCAPE_NEEDED = re.compile(r'["\\\x00-\x1f]')


def _needs_escape(text: str) -> bool:
    return _ESCAPE_NEEDED.search(text) is not None


# --------------------------------------------------------------------------- pre-process

PreProcess = Callable[[Dataset], dict[str, Any]]


def _need_docs(dataset: Dataset | None, what: str = "") -> TextDocs:
    if not isinstance(dataset, TextDocs):
        raise BadRequest("This pre_process_function can only support TextDocsInputDataSet which "
                         "including a list of string with key 'text_docs'")
    if what and not dataset.docs:
        raise BadRequest(f"No input {what} provided")
    return dataset


def _need_similarity(dataset: Dataset | None) -> TextSimilarity:
    if not isinstance(dataset, TextSimilarity):
        raise BadRequest("This pre_process_function can only support TextSimilarityInputDataSet "
                         "([query_text] and [text_docs])")
    return dataset


def _openai_embedding(dataset: Dataset) -> dict[str, Any]:
    # OpenAIEmbeddingPreProcessFunction.java (also connector.pre_process.default.embedding)
    return {"input": list(_need_docs(dataset).docs)}


def _cohere_embedding(dataset: Dataset) -> dict[str, Any]:
    # CohereEmbeddingPreProcessFunction.java
    return {"texts": list(_need_docs(dataset).docs)}


def _bedrock_embedding(dataset: Dataset) -> dict[str, Any]:
    # BedrockEmbeddingPreProcessFunction.java: the first document (one request per document)
    # (also connector.pre_process.bedrock.nova.text_embedding)
    return {"inputText": _need_docs(dataset, "text").docs[0]}


def _bedrock_multimodal_embedding(dataset: Dataset) -> dict[str, Any]:
    # MultiModalConnectorPreProcessFunction.java: text first (may be null), then an image
    docs = _need_docs(dataset).docs
    if not docs or (len(docs) == 1 and docs[0] is None):
        raise BadRequest("No input text or image provided")
    parameters: dict[str, Any] = {"inputText": docs[0]}
    if len(docs) > 1:
        parameters["inputImage"] = docs[1]
    return parameters


def _single(name: str, what: str) -> PreProcess:
    # ImageEmbedding/VideoEmbedding/AudioEmbeddingPreProcessFunction.java
    def process(dataset: Dataset) -> dict[str, Any]:
        return {name: _need_docs(dataset, what).docs[0]}
    return process


def _cohere_multimodal_embedding(dataset: Dataset) -> dict[str, Any]:
    # CohereMultiModalEmbeddingPreProcessFunction.java
    docs = _need_docs(dataset).docs
    if not docs or docs[0] is None:
        raise BadRequest("No image provided")
    return {"images": list(docs)}


def _nova_multimodal_embedding(dataset: Dataset) -> dict[str, Any]:
    # NovaMultiModalEmbeddingPreProcessFunction.java: a document that is a JSON object with
    # a "text"/"image"/"video"/"audio" key fills that parameter; anything else is text.
    # detectModalityParameter and extractContent look the keys up in different orders.
    docs = _need_docs(dataset).docs
    if not docs or (len(docs) == 1 and docs[0] is None):
        raise BadRequest("No input provided")
    doc = docs[0]
    parsed: Any = None
    if doc is not None:
        try:
            parsed = json.loads(doc)
        except ValueError:
            parsed = None
    if not isinstance(parsed, dict):
        return {"text": doc}
    name = next((key for key in ("text", "image", "video", "audio") if key in parsed), "text")
    content: Any = doc
    if doc.startswith("{"):
        found = next((parsed[key] for key in ("text", "image", "audio", "video") if key in parsed), None)
        if found is not None:
            content = found if isinstance(found, str) else json.dumps(found)
    return {name: content}


def _cohere_rerank(dataset: Dataset) -> dict[str, Any]:
    # CohereRerankPreProcessFunction.java (also connector.pre_process.default.rerank)
    data = _need_similarity(dataset)
    return {"query": data.query_text, "documents": list(data.docs), "top_n": len(data.docs)}


def _bedrock_rerank(dataset: Dataset) -> dict[str, Any]:
    # BedrockRerankPreProcessFunction.java
    data = _need_similarity(dataset)
    return {
        "queries": [{"textQuery": {"text": data.query_text}, "type": "TEXT"}],
        "sources": [{"inlineDocumentSource": {"textDocument": {"text": doc}, "type": "TEXT"},
                     "type": "INLINE"} for doc in data.docs],
        "numberOfResults": len(data.docs),
    }


_PRE = "connector.pre_process."
PRE_PROCESS_FUNCTIONS: Mapping[str, PreProcess] = {
    _PRE + "cohere.embedding": _cohere_embedding,
    _PRE + "cohere.multimodal_embedding": _cohere_multimodal_embedding,
    _PRE + "openai.embedding": _openai_embedding,
    _PRE + "default.embedding": _openai_embedding,
    _PRE + "bedrock.embedding": _bedrock_embedding,
    _PRE + "bedrock.multimodal_embedding": _bedrock_multimodal_embedding,
    _PRE + "bedrock.nova.embedding": _nova_multimodal_embedding,
    _PRE + "bedrock.nova.text_embedding": _bedrock_embedding,
    _PRE + "bedrock.nova.image_embedding": _single("inputImage", "image"),
    _PRE + "bedrock.nova.video_embedding": _single("inputVideo", "video"),
    _PRE + "bedrock.nova.audio_embedding": _single("inputAudio", "audio"),
    _PRE + "cohere.rerank": _cohere_rerank,
    _PRE + "default.rerank": _cohere_rerank,
    _PRE + "bedrock.rerank": _bedrock_rerank,
}
DEFAULT_EMBEDDING_PRE_PROCESS = _PRE + "default.embedding"
BEDROCK_EMBEDDING_PRE_PROCESS = _PRE + "bedrock.embedding"


def pre_process(function: str | None, dataset: Dataset | None,
                parameters: Mapping[str, Any] | None = None,
                request_parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The template parameters a built-in function or a Painless script makes of
    ``dataset`` (ConnectorUtils ``processMLInput``). With ``text_docs`` and no function,
    ``default.embedding`` applies. ``parameters`` (the connector's and the request's,
    merged) fill ``${parameters.x}`` in a script.

    A plain remote call (no dataset) adds nothing, as in ml-commons for built-in
    functions and for scripts, unless ``parameters`` set
    ``pre_process_function.process_remote_inference_input`` to true: then a script runs
    on ``request_parameters`` (the request's, escaped)."""
    parameters = parameters or {}
    if dataset is None:
        if function is not None and is_script(function) and _parse_boolean(parameters.get(PROCESS_REMOTE_INFERENCE_INPUT)):
            return _remote_input_script(script_for(function, parameters), request_parameters or {},
                                        _parse_boolean(parameters.get(CONVERT_PARAMETERS_TO_OBJECTS)))
        return {}
    if function is not None and is_script(function):
        return _pre_process_script(script_for(function, parameters), dataset,
                                   _parse_boolean(parameters.get(CONVERT_INPUT_TO_JSON_STRING)))
    if function is None:
        if isinstance(dataset, TextSimilarity):
            raise BadRequest("pre_process_function not defined in connector: text_similarity input "
                             "needs one (e.g. connector.pre_process.cohere.rerank)")
        function = DEFAULT_EMBEDDING_PRE_PROCESS
    process = PRE_PROCESS_FUNCTIONS.get(function)
    if process is None:
        raise BadRequest(unknown_function_reason("pre_process_function", function))
    return process(dataset)


def chunk_size(function: str | None, connector_parameters: Mapping[str, Any], docs: int) -> int:
    """Documents per upstream request (``RemoteConnectorExecutor.calculateChunkSize``): the
    connector's ``input_docs_processed_step_size`` if set, else one for
    ``bedrock.embedding`` (its template takes one text) and for a script, else all of them."""
    step = connector_parameters.get(STEP_SIZE_PARAMETER)
    if step is not None:
        try:
            size = int(step)
        except (TypeError, ValueError):
            size = 0
        if isinstance(step, bool) or size <= 0:
            raise BadRequest(f"Invalid parameter: {STEP_SIZE_PARAMETER}. It must be positive integer.")
        return size
    if function == BEDROCK_EMBEDDING_PRE_PROCESS or (function is not None and is_script(function)):
        return 1   # ml-commons sends one document per request to bedrock.embedding and to scripts
    return max(docs, 1)


def split_dataset(dataset: Dataset | None, size: int) -> list[Dataset | None]:
    """``text_docs`` in chunks of ``size``, in order; other inputs are one request."""
    if not isinstance(dataset, TextDocs):
        return [dataset]
    docs = dataset.docs
    return [TextDocs(docs[start:start + size]) for start in range(0, len(docs), size)]


# --------------------------------------------------------------------------- post-process

Tensor = dict[str, Any]
PostProcess = Callable[[Any, str | None], list[Tensor]]


def _tensor(name: str, data_type: str, data: list[Any]) -> Tensor:
    return {"name": name, "data_type": data_type, "shape": [len(data)], "data": data}


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _embeddings(value: Any, data_type: str | None) -> list[Tensor]:
    # EmbeddingPostProcessFunction.java: a list of vectors, one sentence_embedding each
    if not isinstance(value, list):
        raise _post_error("Post process function input is not a List.")
    if value:
        first = value[0]
        if not isinstance(first, list):
            raise _post_error("The embedding should be a non-empty List containing List of Float values.")
        if not first or not _is_number(first[0]):
            raise _post_error("The embedding should be a non-empty List containing Float values.")
    kind = data_type or "FLOAT32"
    return [_tensor("sentence_embedding", kind, vector) for vector in value]


def _bedrock_embedding_output(value: Any, data_type: str | None) -> list[Tensor]:
    # BedrockEmbeddingPostProcessFunction.java: one vector
    if not isinstance(value, list):
        raise _post_error("Post process function input is not a List.")
    if value and not _is_number(value[0]):
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
        if type(index) is not int or not 0 <= index < len(value) or not _is_number(score):
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
        if isinstance(value, list) and all(_is_number(v) for v in value):
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

# MLResultDataType, in its declaration order: the first whose ".NAME" the filter contains wins.
DATA_TYPES = ("FLOAT32", "FLOAT64", "FLOAT16", "UINT8", "INT32", "INT8", "INT64", "BOOLEAN",
              "UNKNOWN", "STRING", "BINARY", "UBINARY")


def data_type_from_filter(response_filter: str) -> str | None:
    """``ConnectorUtils.parseMLResultDataTypeFromResponseFilter`` (case-insensitive)."""
    lowered = response_filter.lower()
    for name in DATA_TYPES:
        if "." + name.lower() in lowered:
            return name
    return None


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


# --------------------------------------------------------------------------- names


def is_script(function: str) -> bool:
    """ml-commons runs any process function that is not a built-in name as Painless."""
    return function not in PRE_PROCESS_FUNCTIONS and function not in POST_PROCESS_FUNCTIONS \
        and not function.startswith("connector.")


def unknown_function_reason(field: str, name: str) -> str:
    kind = "pre_process" if "pre_process" in field else "post_process"
    known = sorted(PRE_PROCESS_FUNCTIONS if kind == "pre_process" else POST_PROCESS_FUNCTIONS)
    return f"[{field}] {name} is not a built-in function; the built-in ones are: {', '.join(known)}"


def check_function_name(field: str, name: str | None) -> None:
    """At connector creation: a built-in name, nothing, or a Painless script that compiles
    (a syntax error or an unsupported construct is a 400 naming its line and column). In
    the check, each ``${parameters.x}`` stands for a string; at predict time it is filled
    with the parameter's value as JSON text, as ml-commons does."""
    if name is None:
        return
    table: Mapping[str, Any] = PRE_PROCESS_FUNCTIONS if "pre_process" in field else POST_PROCESS_FUNCTIONS
    if name in table:
        return
    if name.startswith("connector."):
        raise BadRequest(unknown_function_reason(field, name))
    try:
        compile_script(_PARAMETER_PLACEHOLDER.sub('"parameter"', name))
    except ScriptError as error:
        raise ScriptError(f"[{field}] {error.reason}") from None


# --------------------------------------------------------------------------- Painless scripts

_PARAMETER_PLACEHOLDER = re.compile(r"\$\{parameters\.([^}]*)\}")


def compile_script(source: str) -> Script:
    """The Painless interpreter's compile_script, imported on first use: about 4 MB of
    resident memory that a server with no script connector never needs."""
    from .painless import compile_script as compile_painless
    return compile_painless(source)


def script_for(function: str, parameters: Mapping[str, Any]) -> Script:
    """The compiled script, its ``${parameters.x}`` filled with each value as JSON text
    (``fillProcessFunctionParameter``; an unknown name stays as written)."""
    if "${parameters." in function:
        function = _PARAMETER_PLACEHOLDER.sub(
            lambda m: _gson_text(parameters[m.group(1)]) if m.group(1) in parameters else m.group(0), function)
    return compile_script(function)


def _gson_text(value: Any, *, doubles: bool = True) -> str:
    """Gson's JSON text, no spaces, of a value Gson parsed (``doubles``: every number is a
    Double, ``1.0``) or Jackson parsed (an integer stays one, other numbers are Doubles)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int) and not doubles:
        return str(value)
    if isinstance(value, (int, float)):
        from .painless.values import double_to_string  # only ever reached from a script
        return double_to_string(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if isinstance(value, list):
        return "[" + ",".join(_gson_text(item, doubles=doubles) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_gson_text(str(k))}:{_gson_text(v, doubles=doubles)}" for k, v in value.items()) + "}"
    return _gson_text(str(value))


def _parse_boolean(value: Any) -> bool:
    """Java's ``Boolean.parseBoolean`` of a parameter's text: "true" in any case."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _pre_process_script(script: Script, dataset: Dataset, as_json_strings: bool = False) -> dict[str, Any]:
    # DefaultPreProcessFunction: the script's params are the MLInput as JSON, documents
    # JSON-escaped first (escapeMLInput), so that a script may quote them as they are.
    # With convert_input_to_json_string, each of them is a String instead, any value but a
    # String its Gson text (convertScriptStringToJsonString, into a new HashMap).
    params: dict[str, Any] = {"algorithm": "REMOTE"}
    if isinstance(dataset, TextSimilarity):
        params["query_text"] = escape_json_text(dataset.query_text)
    params["text_docs"] = [None if doc is None else escape_json_text(doc) for doc in dataset.docs]
    if not as_json_strings:
        return _script_parameters(script.run(params))
    from .painless.values import hash_map_order
    texts = {name: params[name] if isinstance(params[name], str) else _gson_text(params[name])
             for name in hash_map_order(list(params), 16)}
    return _script_parameters(script.run(texts, params_table=16))


def _remote_input_script(script: Script, request_parameters: Mapping[str, Any], as_objects: bool) -> dict[str, Any]:
    # RemoteInferencePreProcessFunction: the script's params are the request's parameters as
    # ml-commons holds them, text (a JSON value sent as its JSON text, getParameterMap),
    # already escaped (RemoteConnectorExecutor escapes them before processInput). With
    # convert_remote_inference_param_to_object, JSON object or array text is read as Gson
    # reads it into an Object: Maps, Lists, every number a Double.
    # The parameters pass through HashMaps on their way (getParameterMap, the escaping,
    # inputParams): the script's params iterate in HashMap order, its table 16 buckets when
    # each is put, pre-sized when they are putAll'd.
    from .painless.library import presized_table
    from .painless.values import hash_map_order, table_size
    params: dict[str, Any] = {}
    try:
        for name in hash_map_order(list(request_parameters), table_size(len(request_parameters))):
            value = request_parameters[name]
            text = value if isinstance(value, str) else _gson_text(value, doubles=False)
            params[name] = json.loads(text, parse_int=float) if as_objects and is_json_container(text) else text
    except RecursionError:
        raise BadRequest("[parameters] are nested too deeply for pre_process_function") from None
    table = 16 if as_objects else presized_table(len(params))
    return _script_parameters(script.run(params, params_table=table))


def _script_parameters(output: Any) -> dict[str, Any]:
    """The parameters a pre-process script's output gives: its text read as JSON,
    ``{"parameters": {...}}``, each value kept if a string, else its JSON text."""
    if output is None:
        raise ScriptError("pre_process_function: Preprocess function output is null")
    if not isinstance(output, str):
        raise ScriptError("pre_process_function must return a String (the JSON of the new parameters)")
    try:
        parsed = json.loads(output)
    except (ValueError, RecursionError):
        raise ScriptError("pre_process_function returned text that is not JSON: "
                          f"{output[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise ScriptError('pre_process_function must return a JSON object: {"parameters": {...}}')
    parameters = parsed.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ScriptError('pre_process_function must return {"parameters": {...}}, with an object')
    # convertScriptStringToJsonString: strings stay, anything else becomes its JSON text
    try:
        return {name: value if isinstance(value, str) else _gson_text(value) for name, value in parameters.items()}
    except RecursionError:
        raise ScriptError("pre_process_function returned parameters nested too deeply") from None


def post_process_script(function: str, parameters: Mapping[str, Any], payload: bytes) -> list[Tensor] | None:
    """The tensors a post-process script makes of the provider's answer, or None when the
    script returns null (ml-commons then reads the answer as if there were no function).

    The script's params are the answer (an array answer under ``result``); text it returns
    that is a JSON object or array is read as one tensor or a list of tensors
    (``ModelTensor.parser``); other text is the ``response`` of one tensor."""
    script = script_for(function, parameters)
    try:
        # Jackson reads a JSON integer as an Integer, or a Long past 32 bits: the
        # interpreter treats an int past 32 bits as a long (``operators.is_long``).
        answer = loads_json(payload)
    except (ValueError, RecursionError):
        raise UpstreamError("post_process_function cannot read the model's answer: it is not JSON",
                            kind="answer") from None
    if isinstance(answer, list):
        answer = {"result": answer}
    elif not isinstance(answer, dict):
        raise BadRequest("Unsupported response type: the model's answer is neither a JSON object nor an array")
    output = script.run(answer, lazy=True)
    from .painless.values import LazyText  # loaded with the script
    if type(output) is LazyText:
        tensors = _lazy_tensors(output)
        if tensors is not None:
            return tensors
        output = output.text()
    if output is None:
        return None
    if not isinstance(output, str):
        raise ScriptError("post_process_function must return a String (the JSON of the tensors)")
    stripped = output.strip()
    parsed: Any = None
    if stripped[:1] in ("{", "["):
        try:
            parsed = loads_json(stripped)
        except (ValueError, RecursionError):
            parsed = None
    if isinstance(parsed, dict):
        return [_script_tensor(parsed)]
    if isinstance(parsed, list):
        return [_script_tensor(item) for item in parsed]
    return [{"name": "response", "dataAsMap": {"response": output}}]


def _lazy_tensors(output: LazyText) -> list[Tensor] | None:
    """The tensors of a script's JSON text with Lists of doubles in it not yet printed
    (``ListPrint``), without printing them and reading them back: the JSON is read with a
    marker string in place of each List, then each marker is replaced by its List. A
    List's Java text reads back as the same doubles (the shortest digits that do), so the
    value is the one the whole text would read as. None when the text is not read that
    way (a List inside a JSON string or as a key, text that is not JSON): then the
    caller reads the whole text."""
    first = output.parts[0] if output.parts else ""
    if type(first) is not str or first.lstrip()[:1] not in ("{", "["):
        return None
    nonce = secrets.token_hex(8)   # a script cannot write a marker it cannot know
    lists: list[list[float]] = []
    pieces: list[str] = []
    for part in output.parts:
        if type(part) is str:
            pieces.append(part)
        else:
            pieces.append(f'"\\u0000{nonce}:{len(lists)}"')
            lists.append(part.values)
    try:
        skeleton = loads_json("".join(pieces).strip())
    except (ValueError, RecursionError):
        return None
    value = _put_lists(skeleton, nonce, lists)
    if value is None:
        return None
    floats = {id(values) for values in lists}
    if isinstance(value, dict):
        return [_script_tensor(value, floats)]
    if isinstance(value, list):
        return [_script_tensor(item, floats) for item in value]
    return None


def _put_lists(value: Any, nonce: str, lists: list[list[float]]) -> Any:
    """``value`` with each marker string replaced by its List; None unless each marker
    was a value of its own (not a key, not inside another string: then it is not a
    string of its own, and the count falls short)."""
    markers = {f"\0{nonce}:{index}": index for index in range(len(lists))}
    placed = 0
    root = [value]
    stack: list[Any] = [root]
    while stack:   # bounded: the JSON was read, so it is finite
        container = stack.pop()
        for key in (container.keys() if type(container) is dict else range(len(container))):
            item = container[key]
            kind = type(item)
            if kind is str:
                index = markers.get(item)
                if index is not None:
                    container[key] = lists[index]
                    placed += 1
            elif kind is dict or kind is list:
                stack.append(item)
    return root[0] if placed == len(lists) else None


def _script_tensor(item: Any, floats: set[int] = frozenset()) -> Tensor:
    """``ModelTensor.parser``: known fields kept in ``toXContent`` order, others skipped."""
    if not isinstance(item, dict):
        raise ScriptError("post_process_function returned a JSON array whose elements are not tensor objects")
    tensor: Tensor = {}
    if "name" in item:
        tensor["name"] = item["name"] if isinstance(item["name"], str) or item["name"] is None else str(item["name"])
    data_type = item.get("data_type")
    if data_type is not None:
        if data_type not in DATA_TYPES:
            raise ScriptError(f"post_process_function returned an unknown data_type [{data_type}]; "
                              f"one of {', '.join(DATA_TYPES)}")
        tensor["data_type"] = data_type
    shape = item.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(_is_number(n) for n in shape):
            raise ScriptError("post_process_function returned a tensor whose shape is not a list of numbers")
        tensor["shape"] = [int(n) for n in shape]
    data = item.get("data")
    if data_type is not None and isinstance(data, list) and data:
        if id(data) not in floats and not set(map(type, data)) <= {int, float}:
            raise ScriptError("post_process_function returned a tensor whose data is not a list of numbers")
        tensor["data"] = data
    if isinstance(item.get("result"), str):
        tensor["result"] = item["result"]
    if isinstance(item.get("dataAsMap"), dict):
        tensor["dataAsMap"] = item["dataAsMap"]
    return tensor
