"""How ``text_docs`` are split into upstream requests
(``ml-algorithms/.../remote/RemoteConnectorExecutor.java``, ``calculateChunkSize``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BadRequest
from .builtin_pre import BEDROCK_EMBEDDING_PRE_PROCESS
from .functions import is_script
from .inputs import Dataset, TextDocs

STEP_SIZE_PARAMETER = "input_docs_processed_step_size"


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
