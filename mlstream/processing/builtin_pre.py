"""ml-commons' built-in pre-process functions, by name: each turns a dataset into the
template parameters of one upstream request (``connector/MLPreProcessFunction.java``,
``connector/functions/preprocess/*``, under ``common/src/main/java/org/opensearch/ml/common/``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BadRequest
from .inputs import Dataset, TextDocs, TextSimilarity

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
