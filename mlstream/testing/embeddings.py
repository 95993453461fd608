"""Deterministic embeddings and rerank scores for the fake providers, and the answers
of their embedding and rerank APIs.

Tests check the numbers that come out of mlstream against :func:`fake_vector` and
:func:`fake_relevance` called with the same inputs. A benchmark of the gateway must
not measure the fake: vectors and their JSON text are cached per (text, dimensions),
so an answer is a join of cached strings.

An OpenAI embeddings model whose name starts with ``bag-of-words`` answers
:func:`bag_of_words_vector` instead: the sum of its words' vectors, so texts of the same
words (case and punctuation aside) embed alike and texts sharing most of their words are
close, as a real embedding model places paraphrases (the response cache's semantic tests).

Answer shapes (what each provider's documentation shows):

- OpenAI ``POST /v1/embeddings`` (Azure: ``/openai/deployments/{d}/embeddings``):
  ``{"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],...}``
- Cohere ``POST /v1/embed``: ``{"embeddings":[[...]]}`` (``"embeddings":{"float":...}``
  when ``embedding_types`` is given), ``/v2/embed``: always by type;
  ``POST /v1/rerank`` / ``/v2/rerank``: ``{"results":[{"index","relevance_score"}]}``,
  best first, ``top_n`` of them.
- Bedrock InvokeModel: Titan text ``{"embedding":[...],"inputTextTokenCount":n}``
  (``embeddingsByType`` with ``embeddingTypes``), Titan multimodal the same, Cohere
  ``{"embeddings":[[...]],"response_type":"embeddings_floats"}``, Nova multimodal
  ``{"embeddings":[{"embeddingType":"TEXT","embedding":[...]}]}``; bedrock-agent-runtime
  ``POST /rerank``: ``{"results":[{"index","relevanceScore"}]}``, best first; InvokeModel
  on a rerank model (``amazon.rerank-v1:0``, ``cohere.rerank-v3-5:0``) with
  ``{"query", "documents"}``: ``{"results":[{"index","relevance_score"}]}``, best first.
- SageMaker endpoints (``sagemaker_answer``): a Text Embeddings Inference container
  (``{"inputs": text or [texts]}`` -> ``[[...]]``; ``{"query", "texts"}`` ->
  ``[{"index","score"}]`` best first) and a Hugging Face cross-encoder
  (``{"inputs": [{"text","text_pair"}]}`` -> ``[{"label","score"}]`` in input order).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import random
import re
import struct
import uuid
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BAG_OF_WORDS",
    "EmbeddingRequestError",
    "bag_of_words_vector",
    "bedrock_invoke",
    "bedrock_rerank",
    "cohere_embed",
    "cohere_rerank",
    "fake_relevance",
    "fake_vector",
    "openai_embeddings",
    "quantized",
    "sagemaker_answer",
]

OPENAI_DIMENSIONS = 1536
COHERE_DIMENSIONS = 1024
TITAN_V1_DIMENSIONS = 1536
TITAN_V2_DIMENSIONS = 1024
TITAN_IMAGE_DIMENSIONS = 1024
NOVA_DIMENSIONS = 3072
MAX_DIMENSIONS = 8192
_WORD = re.compile(r"\w+")
BAG_OF_WORDS = "bag-of-words"


class EmbeddingRequestError(ValueError):
    """The request is malformed for the API; the fake answers 400 with this reason."""


@functools.lru_cache(maxsize=8192)
def fake_vector(text: str, dimensions: int) -> tuple[float, ...]:
    """A reproducible vector of ``dimensions`` floats in [-1, 1] (6 decimals) for ``text``."""
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    rng = random.Random(seed)
    return tuple(round(rng.uniform(-1.0, 1.0), 6) for _ in range(dimensions))


def bag_of_words_vector(text: str, dimensions: int) -> tuple[float, ...]:
    """The sum of ``fake_vector`` of each of the text's words, lower-cased (6 decimals)."""
    total = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        for index, value in enumerate(fake_vector(word, dimensions)):
            total[index] += value
    return tuple(round(value, 6) for value in total)


@functools.lru_cache(maxsize=8192)
def _vector_json(text: str, dimensions: int, kind: str) -> str:
    return json.dumps(quantized(fake_vector(text, dimensions), kind), separators=(",", ":"))


def quantized(vector: Sequence[float], kind: str) -> list[Any]:
    """The vector as Cohere's embedding types give it: ``float``; ``int8`` / ``uint8``
    scaled; ``binary`` / ``ubinary`` one bit per dimension (positive: 1), packed eight to
    a byte, as signed (byte - 128) or unsigned ints."""
    if kind == "float":
        return list(vector)
    if kind == "int8":
        return [round(v * 127) for v in vector]
    if kind == "uint8":
        return [round((v + 1) * 127.5) for v in vector]
    if kind in ("binary", "ubinary"):
        packed = []
        for start in range(0, len(vector), 8):
            byte = 0
            for v in vector[start:start + 8]:
                byte = (byte << 1) | (1 if v > 0 else 0)
            packed.append(byte - 128 if kind == "binary" else byte)
        return packed
    raise EmbeddingRequestError(f"unknown embedding type {kind!r}")


def fake_relevance(query: str, document: str) -> float:
    """The share of the query's words found in the document (0..1, 6 decimals)."""
    words = {w.lower() for w in _WORD.findall(query)}
    if not words:
        return 0.0
    found = {w.lower() for w in _WORD.findall(document)}
    return round(len(words & found) / len(words), 6)


def _ranked(query: str, documents: Sequence[str], top_n: int | None) -> list[tuple[int, float]]:
    scored = sorted(((i, fake_relevance(query, d)) for i, d in enumerate(documents)),
                    key=lambda pair: (-pair[1], pair[0]))
    return scored[:top_n] if top_n is not None else scored


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise EmbeddingRequestError(f"{name} must be a non-empty string or list of strings")
    return value


def _dimensions(value: Any, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or not 1 <= value <= MAX_DIMENSIONS:
        raise EmbeddingRequestError(f"dimensions must be an integer from 1 to {MAX_DIMENSIONS}")
    return value


def _tokens(texts: Sequence[str]) -> int:
    return sum(len(_WORD.findall(t)) for t in texts)


@functools.lru_cache(maxsize=8192)
def _vector_base64(text: str, dimensions: int) -> str:
    # OpenAI's encoding_format "base64": little-endian float32s.
    vector = fake_vector(text, dimensions)
    return '"' + base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode() + '"'


def openai_embeddings(body: dict[str, Any], model: str) -> bytes:
    texts = _texts(body.get("input"), "input")
    dims = _dimensions(body.get("dimensions"), OPENAI_DIMENSIONS)
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise EmbeddingRequestError("encoding_format must be float or base64")
    if model.startswith(BAG_OF_WORDS):
        items = ",".join(json.dumps({"object": "embedding", "index": i, "embedding": _encoded(
            bag_of_words_vector(t, dims), encoding)}) for i, t in enumerate(texts))
    else:
        items = ",".join(f'{{"object":"embedding","index":{i},"embedding":'
                         f'{_vector_base64(t, dims) if encoding == "base64" else _vector_json(t, dims, "float")}}}'
                         for i, t in enumerate(texts))
    usage = _tokens(texts)
    tail = json.dumps({"model": model, "usage": {"prompt_tokens": usage, "total_tokens": usage}})
    return f'{{"object":"list","data":[{items}],{tail[1:]}'.encode()


def _encoded(vector: Sequence[float], encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return list(vector)


def _by_type(texts: Sequence[str], dims: int, kinds: Sequence[str]) -> str:
    return "{" + ",".join(f'"{kind}":[' + ",".join(_vector_json(t, dims, kind) for t in texts) + "]"
                          for kind in kinds) + "}"


def _embedding_types(value: Any, default: Sequence[str] | None) -> Sequence[str] | None:
    if value is None:
        return default
    kinds = ("float", "int8", "uint8", "binary", "ubinary")
    if not isinstance(value, list) or not value or any(k not in kinds for k in value):
        raise EmbeddingRequestError(f"embedding_types must be a list of {', '.join(kinds)}")
    return value


def cohere_embed(body: dict[str, Any], version: int) -> bytes:
    """Cohere embed, ``version`` 1 (``/v1/embed``, also Bedrock's Cohere models) or 2:
    ``texts``, or ``images`` (data URIs, embedded like texts)."""
    texts = _texts(body.get("texts") if "images" not in body else body["images"],
                   "images" if "images" in body else "texts")
    kinds = _embedding_types(body.get("embedding_types"), ["float"] if version == 2 else None)
    head = json.dumps({"id": str(uuid.uuid4()), "texts": texts})[:-1]
    if kinds is None:
        vectors = "[" + ",".join(_vector_json(t, COHERE_DIMENSIONS, "float") for t in texts) + "]"
        return f'{head},"embeddings":{vectors},"response_type":"embeddings_floats"}}'.encode()
    return (f'{head},"embeddings":{_by_type(texts, COHERE_DIMENSIONS, kinds)},'
            f'"response_type":"embeddings_by_type"}}').encode()


def cohere_rerank(body: dict[str, Any]) -> bytes:
    query = body.get("query")
    if not isinstance(query, str):
        raise EmbeddingRequestError("query must be a string")
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise EmbeddingRequestError("documents must be a non-empty list")
    texts = [d if isinstance(d, str) else d.get("text", "") if isinstance(d, dict) else "" for d in documents]
    top_n = body.get("top_n")
    if top_n is not None and (type(top_n) is not int or top_n < 1):
        raise EmbeddingRequestError("top_n must be a positive integer")
    results = [{"index": i, "relevance_score": s} for i, s in _ranked(query, texts, top_n)]
    return json.dumps({"id": str(uuid.uuid4()), "results": results,
                       "meta": {"billed_units": {"search_units": 1}}}).encode()


def bedrock_invoke(model_id: str, body: dict[str, Any]) -> bytes:
    """InvokeModel for the embedding models the ml-commons blueprints use."""
    if model_id.startswith("cohere.embed"):
        return cohere_embed(body, 1)
    if model_id.startswith("amazon.titan-embed-image"):
        text, image = body.get("inputText"), body.get("inputImage")
        if text is None and image is None:
            raise EmbeddingRequestError("Malformed input request: provide inputText or inputImage")
        seed = f"{text or ''}|{image or ''}"
        dims = _dimensions(body.get("embeddingConfig", {}).get("outputEmbeddingLength"), TITAN_IMAGE_DIMENSIONS)
        return (f'{{"embedding":{_vector_json(seed, dims, "float")},'
                f'"inputTextTokenCount":{_tokens([text or ""])}}}').encode()
    if model_id.startswith("amazon.titan-embed-text"):
        text = body.get("inputText")
        if not isinstance(text, str):
            raise EmbeddingRequestError("Malformed input request: inputText must be a string")
        v2 = "v2" in model_id
        dims = _dimensions(body.get("dimensions"), TITAN_V2_DIMENSIONS if v2 else TITAN_V1_DIMENSIONS)
        answer = f'{{"embedding":{_vector_json(text, dims, "float")},"inputTextTokenCount":{_tokens([text])}'
        kinds = body.get("embeddingTypes")
        if v2 and kinds is not None:
            if not isinstance(kinds, list) or any(k not in ("float", "binary") for k in kinds):
                raise EmbeddingRequestError("embeddingTypes must be a list of float, binary")
            # Titan's binary type is one 0/1 per dimension, not packed.
            by_type = {k: (list(fake_vector(text, dims)) if k == "float"
                           else [1 if v > 0 else 0 for v in fake_vector(text, dims)]) for k in kinds}
            answer += f',"embeddingsByType":{json.dumps(by_type)}'
        return (answer + "}").encode()
    if model_id.startswith(("amazon.rerank", "cohere.rerank")):
        results = json.loads(cohere_rerank(body))["results"]
        return json.dumps({"results": results}).encode()
    if model_id.startswith("amazon.nova"):
        params = body.get("singleEmbeddingParams")
        if body.get("taskType") != "SINGLE_EMBEDDING" or not isinstance(params, dict):
            raise EmbeddingRequestError("taskType SINGLE_EMBEDDING and singleEmbeddingParams are required")
        dims = _dimensions(params.get("embeddingDimension"), NOVA_DIMENSIONS)
        inputs = [m for m in ("text", "image", "video", "audio") if isinstance(params.get(m), dict)]
        if len(inputs) != 1:
            raise EmbeddingRequestError(f"exactly one of text, image, video, audio is required, got {inputs}")
        section = params[inputs[0]]
        seed = section.get("value") if inputs[0] == "text" else (section.get("source") or {}).get("bytes")
        if not isinstance(seed, str):
            raise EmbeddingRequestError(f"singleEmbeddingParams.{inputs[0]} has no content")
        return (f'{{"embeddings":[{{"embeddingType":"{inputs[0].upper()}",'
                f'"embedding":{_vector_json(seed, dims, "float")}}}]}}').encode()
    raise EmbeddingRequestError(f"The provided model identifier is invalid: {model_id}")


def bedrock_rerank(body: dict[str, Any]) -> bytes:
    """bedrock-agent-runtime Rerank."""
    queries = body.get("queries")
    sources = body.get("sources")
    try:
        query = queries[0]["textQuery"]["text"]
        texts = [s["inlineDocumentSource"]["textDocument"]["text"] for s in sources]
    except (TypeError, KeyError, IndexError):
        raise EmbeddingRequestError("queries[0].textQuery.text and sources[].inlineDocumentSource."
                                    "textDocument.text are required") from None
    config = body.get("rerankingConfiguration") or {}
    top_n = (config.get("bedrockRerankingConfiguration") or {}).get("numberOfResults")
    results = [{"index": i, "relevanceScore": s} for i, s in _ranked(query, texts, top_n)]
    return json.dumps({"results": results}).encode()


SAGEMAKER_DIMENSIONS = 768


def sagemaker_answer(body: Any) -> bytes:
    """A SageMaker embedding or rerank endpoint's answer to ``body`` (see the module doc)."""
    if not isinstance(body, dict):
        raise EmbeddingRequestError("the body must be a JSON object")
    inputs = body.get("inputs")
    if "query" in body and "texts" in body:
        query, texts = body["query"], _texts(body["texts"], "texts")
        if not isinstance(query, str):
            raise EmbeddingRequestError("query must be a string")
        return json.dumps([{"index": i, "score": s} for i, s in _ranked(query, texts, None)]).encode()
    if isinstance(inputs, list) and inputs and all(isinstance(p, dict) for p in inputs):
        pairs = [(p.get("text"), p.get("text_pair")) for p in inputs]
        if not all(isinstance(a, str) and isinstance(b, str) for a, b in pairs):
            raise EmbeddingRequestError("each input needs a text and a text_pair")
        return json.dumps([{"label": "LABEL_0", "score": fake_relevance(a, b)} for a, b in pairs]).encode()
    texts = [inputs] if isinstance(inputs, str) else _texts(inputs, "inputs")
    return ("[" + ",".join(_vector_json(t, SAGEMAKER_DIMENSIONS, "float") for t in texts) + "]").encode()
