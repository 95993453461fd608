"""Which provider APIs the OpenAI chat front translates to, keyed by dialect.

An OpenAI-interface model needs no translation (the front relays it); every other chat
interface has one ``Translation``: the request's fields in the provider's API, how they
are set on the connector's rendered body, and how the provider's answer becomes
``chat.completion``. Its stream is read as ``StreamKind.CHAT`` (the answer's text, reasoning
and tool calls) and written as chat.completion.chunk events (``events``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...providers import Dialect
from ...providers.anthropic import ANTHROPIC_MESSAGES
from ...providers.bedrock import BEDROCK_CONVERSE, BEDROCK_CONVERSE_CLAUDE, BEDROCK_CONVERSE_DEEPSEEK_R1
from ...providers.gemini import GEMINI_GENERATE_CONTENT
from ...providers.sagemaker import SAGEMAKER_LMI, SAGEMAKER_TGI
from . import anthropic, converse, gemini, sagemaker

Fields = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Translation:
    request: Callable[[Mapping[str, Any], bool], Fields]    # (chat request, stream) -> provider fields
    body: Callable[[Mapping[str, Any], Mapping[str, Any]], Fields]  # (rendered body, fields) -> body sent
    answer: Callable[..., Fields]  # (provider answer, *, completion_id, created, model) -> chat.completion


_CONVERSE = Translation(lambda body, stream: converse.converse_request(body), converse.converse_body,
                        converse.chat_completion_from_converse)
_SAGEMAKER = Translation(lambda body, stream: sagemaker.sagemaker_chat_fields(body, stream=stream),
                         sagemaker.sagemaker_chat_body, sagemaker.chat_completion_from_sagemaker)

TRANSLATIONS: dict[Dialect, Translation] = {
    BEDROCK_CONVERSE: _CONVERSE,
    BEDROCK_CONVERSE_CLAUDE: _CONVERSE,
    BEDROCK_CONVERSE_DEEPSEEK_R1: _CONVERSE,
    ANTHROPIC_MESSAGES: Translation(lambda body, stream: anthropic.anthropic_request(body), anthropic.anthropic_body,
                                    anthropic.chat_completion_from_anthropic),
    GEMINI_GENERATE_CONTENT: Translation(lambda body, stream: gemini.gemini_request(body, stream=stream),
                                         gemini.gemini_body, gemini.chat_completion_from_gemini),
    SAGEMAKER_TGI: _SAGEMAKER,
    SAGEMAKER_LMI: _SAGEMAKER,
}
