"""Provider dialects: how to call each provider's streaming API and read its frames."""

from __future__ import annotations

from typing import Any, Mapping

from ..models.connectors import Connector
from ..errors import BadRequest
from .anthropic import ANTHROPIC_MESSAGES
from .base import Dialect, StreamDecoder, StreamKind
from .bedrock import BEDROCK_CONVERSE, BEDROCK_CONVERSE_CLAUDE, BEDROCK_CONVERSE_DEEPSEEK_R1
from .gemini import GEMINI_GENERATE_CONTENT, is_generate_content
from .openai import OPENAI_CHAT, OPENAI_COMPLETIONS
from .sagemaker import SAGEMAKER_LMI, SAGEMAKER_TGI

DIALECTS: tuple[Dialect, ...] = (
    OPENAI_CHAT, OPENAI_COMPLETIONS, BEDROCK_CONVERSE, BEDROCK_CONVERSE_CLAUDE, BEDROCK_CONVERSE_DEEPSEEK_R1,
    ANTHROPIC_MESSAGES, GEMINI_GENERATE_CONTENT, SAGEMAKER_TGI, SAGEMAKER_LMI)
_DIALECTS: dict[str, Dialect] = {dialect.name: dialect for dialect in DIALECTS}

LLM_INTERFACE = "_llm_interface"


def dialect_for(parameters: Mapping[str, Any], connector: Connector) -> Dialect:
    """The dialect named by ``_llm_interface``, or inferred from the connector."""
    named = parameters.get(LLM_INTERFACE)
    if named is not None:
        if not isinstance(named, str):
            raise BadRequest(f"[{LLM_INTERFACE}] must be a string")
        key = named.strip().lower()
        if key not in _DIALECTS:
            raise BadRequest(f"Unsupported llm interface [{named.strip()}]; supported: "
                             + ", ".join(sorted(_DIALECTS)))
        return _DIALECTS[key]
    url = connector.action("predict").url.split("?", 1)[0].rstrip("/")
    if connector.protocol == "aws_sigv4" and url.endswith("/converse"):
        return BEDROCK_CONVERSE
    if is_generate_content(url):
        return GEMINI_GENERATE_CONTENT
    if url.endswith("/v1/messages"):
        return ANTHROPIC_MESSAGES
    if url.endswith("/chat/completions"):
        return OPENAI_CHAT
    if url.endswith("/completions"):
        return OPENAI_COMPLETIONS
    raise BadRequest(f"[{LLM_INTERFACE}] is required: the streaming dialect cannot be inferred "
                     "from this connector; supported: " + ", ".join(sorted(_DIALECTS)))


def known_dialect(parameters: Mapping[str, Any], connector: Connector) -> Dialect | None:
    """``dialect_for``, or None where it would refuse: a call that never streams (an
    embedding connector, say) needs no interface."""
    try:
        return dialect_for(parameters, connector)
    except BadRequest:
        return None


__all__ = ["DIALECTS", "Dialect", "StreamDecoder", "StreamKind", "dialect_for", "known_dialect", "LLM_INTERFACE"]
