"""Every dialect implements the whole ``Dialect`` protocol, the one the predictor calls:
the same methods with the same parameters, and a decoder (or ValueError) for every kind."""

from __future__ import annotations

import inspect

import pytest

from mlstream.providers import DIALECTS, Dialect, StreamKind
from mlstream.providers.anthropic import AnthropicMessagesDialect
from mlstream.providers.openai import OpenAIDialect

PROTOCOL_METHODS = {name: inspect.signature(member) for name, member in vars(Dialect).items()
                    if callable(member) and not name.startswith("_")}


def test_the_protocol_declares_what_the_predictor_calls() -> None:
    assert set(PROTOCOL_METHODS) == {"stream_request", "new_decoder"}


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda dialect: dialect.name)
def test_each_dialect_has_every_protocol_method_with_its_parameters(dialect: Dialect) -> None:
    for name, declared in PROTOCOL_METHODS.items():
        implemented = inspect.signature(getattr(type(dialect), name))
        assert list(implemented.parameters) == list(declared.parameters), (dialect.name, name)
        defaults = {p.name: p.default for p in implemented.parameters.values()}
        assert defaults == {p.name: p.default for p in declared.parameters.values()}, (dialect.name, name)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda dialect: dialect.name)
@pytest.mark.parametrize("kind", list(StreamKind), ids=lambda kind: kind.value)
def test_each_kind_gives_a_decoder_or_says_there_is_none(dialect: Dialect, kind: StreamKind) -> None:
    if kind is StreamKind.RELAY and not isinstance(dialect, (OpenAIDialect, AnthropicMessagesDialect)):
        with pytest.raises(ValueError, match="has no relay stream"):
            dialect.new_decoder(kind)
        return
    decoder = dialect.new_decoder(kind)
    assert decoder.feed(b"") == []
    assert decoder.finish(), "a stream that never ended is a failure"


def test_relay_and_text_decoders_differ_where_they_should() -> None:
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    chat = DIALECTS[0]
    assert type(chat.new_decoder(StreamKind.RELAY).feed(chunk)[0]).__name__ == "Chunk"
    assert type(chat.new_decoder(StreamKind.TEXT).feed(chunk)[0]).__name__ == "Delta"
