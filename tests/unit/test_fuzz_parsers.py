"""Property-based fuzzing of the pure parsers (issue 6, point 4: hostile input).

Random and mutated input into the SSE decoder, the two provider stream decoders,
connector templating and JSONPath: each may only answer with its own values or
its own documented error, whatever the bytes, however they are split.

    SSEDecoder              SSEEvent, or ProtocolError (size limits); chunking never matters
    OpenAIStreamDecoder     Delta / Done / Failure only, never raises; one terminal item, last
    ConverseStreamDecoder   the same, over AWS event-stream frames (valid, mutated, forged)
    render / render_json    only TemplateError; a JSON body always parses; no secret in a reason
    compile_path / read     only JsonPathError / PathNotFound
    semantic_split          a text and the request without its conversation, or None; never raises
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from http.client import HTTPMessage
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from mlstream.caching.semantic import CONVERSATION_FIELDS, semantic_split
from mlstream.errors import MLStreamError, ProtocolError, TemplateError
from mlstream.wire.jsonpath import JsonPath, JsonPathError, PathNotFound, compile_path
from mlstream.providers.bedrock import ConverseStreamDecoder
from mlstream.providers.openai import OpenAIStreamDecoder
from mlstream.fronts.mlcommons import events as sse_events
from mlstream.wire.sse import SSEDecoder, SSEEvent, encode_comment, encode_data
from mlstream.providers.events import Delta, Done, Failure
from mlstream.wire.templating import placeholders, render, render_json_body
from mlstream.testing.eventstream import encode_event, encode_exception, encode_message

from ..support.fuzz import fuzz


# --- shared strategies -------------------------------------------------------------------

def json_values(*, text: st.SearchStrategy[str] | None = None, nan: bool = True,
                max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value Python's json.loads can produce (NaN/Infinity included: it accepts them)."""
    text = text if text is not None else st.text(max_size=12)
    scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
               | st.floats(allow_nan=nan, allow_infinity=nan) | text)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=max_leaves)


@st.composite
def split(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at random offsets (empty pieces included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    pieces, previous = [], 0
    for cut in [*cuts, len(data)]:
        pieces.append(data[previous:cut])
        previous = cut
    return pieces


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few random byte flips, truncations, deletions, insertions or repeats."""
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "delete", "insert", "repeat"]))
        if not data:
            op = "insert"
        if op == "flip":
            i = draw(st.integers(0, len(data) - 1))
            data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
        elif op == "truncate":
            data = data[:draw(st.integers(0, len(data)))]
        elif op == "delete":
            i = draw(st.integers(0, len(data) - 1))
            data = data[:i] + data[i + draw(st.integers(1, 16)):]
        elif op == "insert":
            i = draw(st.integers(0, len(data)))
            data = data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
        else:
            i = draw(st.integers(0, len(data) - 1))
            data = data[:i] + data[i:i + draw(st.integers(1, 64))] + data[i:]
    return data


def chunked(data: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes]]:
    return data.flatmap(split)


# --- SSEDecoder ----------------------------------------------------------------------------

SSE_TOKENS = [b"data", b"data:", b"data: ", b"event:", b"event: x", b"id:", b"id: 7", b"retry:",
              b"retry: 1500", b":", b": ping", b"\n", b"\r", b"\r\n", b"\n\n", b"\xef\xbb\xbf",
              b" ", b"\x00", b"[DONE]", b"{", b"}", b"\xff", b"\xc3", b"\xa9"]
sse_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(SSE_TOKENS) | st.binary(max_size=6), max_size=40).map(b"".join),
)


class SmallSSEDecoder(SSEDecoder):
    """Tiny limits, so random input reaches the ProtocolError paths too."""

    MAX_LINE_BYTES = 24
    MAX_EVENT_BYTES = 48


def decode_sse(decoder: SSEDecoder, chunks: list[bytes]) -> tuple[list[SSEEvent], bool]:
    """Feed every chunk; stop at the first ProtocolError (the decoder is spent)."""
    events: list[SSEEvent] = []
    for chunk in chunks:
        try:
            out = decoder.feed(chunk)
        except ProtocolError as error:
            assert isinstance(error.reason, str) and error.reason
            return events, True
        assert isinstance(out, list)
        events += out
    return events, False


def assert_sse_events(events: list[Any]) -> None:
    for event in events:
        assert type(event) is SSEEvent, event
        assert isinstance(event.data, str) and isinstance(event.event, str) and event.event
        assert event.id is None or isinstance(event.id, str)
        assert event.retry is None or (isinstance(event.retry, int) and event.retry >= 0)


@fuzz(200)
@given(chunks=chunked(sse_bytes), small=st.booleans())
def test_sse_decoder_yields_only_events_or_protocol_error(chunks, small):
    decoder = SmallSSEDecoder() if small else SSEDecoder()
    events, _ = decode_sse(decoder, chunks)
    assert_sse_events(events)


@fuzz(200)
@given(data=sse_bytes.flatmap(lambda d: st.tuples(st.just(d), split(d))), small=st.booleans())
def test_sse_decoder_chunking_never_changes_the_events(data, small):
    whole, pieces = data
    decoder_class = SmallSSEDecoder if small else SSEDecoder
    one_go = decoder_class()
    expected, whole_failed = decode_sse(one_go, [whole])
    in_pieces = decoder_class()
    got, pieces_failed = decode_sse(in_pieces, pieces)
    assert pieces_failed == whole_failed
    if not whole_failed:
        assert got == expected
        assert in_pieces.has_pending == one_go.has_pending


texts = st.lists(st.text(max_size=4) | st.sampled_from(["\r", "\n", "\r\n", "\ud800", "\ufeff", ":", " "]),
                 max_size=10).map("".join)


def sse_text(text: str) -> str:
    """What a receiver makes of ``text`` after encode_data: line ends normalised, surrogates '?'."""
    return text.replace("\r\n", "\n").replace("\r", "\n").encode("utf-8", "replace").decode("utf-8")


@fuzz(200)
@given(stream=st.lists(st.tuples(texts, st.none() | texts), max_size=6).flatmap(
    lambda items: st.tuples(st.just(items), split(b"".join(
        encode_data(text) + (encode_comment(comment) if comment is not None else b"")
        for text, comment in items)))))
def test_sse_encode_data_round_trips_any_text(stream):
    items, chunks = stream
    events, failed = decode_sse(SSEDecoder(), chunks)
    assert not failed
    assert events == [SSEEvent(data=sse_text(text)) for text, _ in items]


# --- provider stream decoders ---------------------------------------------------------------

TERMINAL = (Done, Failure)


def drive(decoder: Any, chunks: list[bytes]) -> list[Any]:
    """Run a decoder as the stream reader does: feed until a terminal item, then finish().

    feed() and finish() must never raise, whatever the bytes.
    """
    items: list[Any] = []
    for chunk in chunks:
        out = decoder.feed(chunk)
        assert isinstance(out, list), out
        items += out
        if any(isinstance(item, TERMINAL) for item in out):
            assert decoder.finish() == []   # already over: finish adds nothing
            break
    else:
        items += decoder.finish()
    assert decoder.finish() == []           # finish twice: still nothing
    return items


def assert_stream_items(items: list[Any], *, content: tuple[type, ...]) -> None:
    """Only Delta/Done/Failure; exactly one terminal item and it is the last; all writable."""
    for item in items:
        assert type(item) in (Delta, Done, Failure), item
        if isinstance(item, Delta):
            assert isinstance(item.content, content) and item.content, item
            sse_events.content_event(item.content)
        elif isinstance(item, Done):
            assert item.usage is None or isinstance(item.usage, dict), item
            sse_events.last_event(item.finish_reason, item.usage)
        else:
            assert isinstance(item.error, MLStreamError), item
            assert isinstance(item.error.reason, str) and item.error.reason
            assert 400 <= item.error.http_status < 600
            sse_events.error_event(item.error)
    terminals = [i for i, item in enumerate(items) if isinstance(item, TERMINAL)]
    assert terminals == [len(items) - 1], items


def normalised(items: list[Any]) -> list[Any]:
    return [(type(item.error).__name__, item.error.reason, item.error.http_status)
            if isinstance(item, Failure) else repr(item) for item in items]


# OpenAI -------------------------------------------------------------------------------------

def openai_event(chunk: Any) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8", "replace") + b"\n\n"


@st.composite
def openai_stream(draw: st.DrawFn, chat: bool) -> bytes:
    """A well-formed OpenAI stream: content chunks, finish reason, maybe usage, [DONE]."""
    out = []
    for text in draw(st.lists(st.text(max_size=8), max_size=5)):
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        out.append(openai_event({"object": "chat.completion.chunk", "choices": [choice]}))
        if draw(st.booleans()):
            out.append(b": keep-alive\n\n")
    out.append(openai_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if draw(st.booleans()):
        out.append(openai_event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))
    if draw(st.booleans()):
        out.append(openai_event({"error": {"message": draw(st.text(max_size=10))}}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


OPENAI_KEYS = ["choices", "delta", "content", "text", "finish_reason", "usage", "prompt_tokens",
               "completion_tokens", "error", "message", "index", "object"]
openai_shaped = json_values(text=st.sampled_from(OPENAI_KEYS) | st.text(max_size=6), max_leaves=16)


@st.composite
def openai_lines(draw: st.DrawFn) -> bytes:
    """SSE events whose data is random JSON in OpenAI's vocabulary, or not JSON at all."""
    events = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["json", "shaped", "done", "junk", "deep"]))
        if kind == "json":
            events.append(openai_event(draw(openai_shaped)))
        elif kind == "shaped":
            choice = {k: draw(openai_shaped) for k in draw(st.sets(st.sampled_from(
                ["delta", "text", "finish_reason", "index"])))}
            body = {"choices": draw(st.sampled_from([[choice], choice, [choice, choice]]))}
            for key in draw(st.sets(st.sampled_from(["usage", "error"]))):
                body[key] = draw(openai_shaped)
            events.append(openai_event(body))
        elif kind == "done":
            events.append(b"data: [DONE]\n\n")
        elif kind == "deep":
            # A hostile upstream nesting its JSON beyond the recursion limit.
            depth = draw(st.integers(0, 13).map(lambda e: 2 ** e))
            events.append(b"data: " + b"[" * depth + b"]" * depth + b"\n\n")
        else:
            events.append(b"data: " + draw(st.binary(max_size=20)).replace(b"\n", b"").replace(b"\r", b"")
                          + b"\n\n")
    return b"".join(events)


openai_inputs = st.booleans().flatmap(lambda chat: st.tuples(st.just(chat), st.one_of(
    sse_bytes,
    openai_lines(),
    openai_stream(chat),
    openai_stream(chat).flatmap(mutated),
).flatmap(split)))


@fuzz(200)
@given(case=openai_inputs)
@example(case=(True, [b"data: " + b"[" * 2000 + b"\n\n"]))
def test_openai_decoder_never_raises_and_ends_once(case):
    chat, chunks = case
    items = drive(OpenAIStreamDecoder(chat), chunks)
    assert_stream_items(items, content=(str,))


@fuzz(150)
@given(data=st.one_of(openai_lines(), openai_stream(True).flatmap(mutated)).flatmap(
    lambda d: st.tuples(st.just(d), split(d))))
def test_openai_decoder_split_does_not_matter(data):
    whole, pieces = data
    assert normalised(drive(OpenAIStreamDecoder(True), [whole])) == \
        normalised(drive(OpenAIStreamDecoder(True), pieces))


def test_openai_valid_stream_ends_with_done():
    # the mutation fuzz above is only meaningful if the unmutated stream decodes cleanly
    items = drive(OpenAIStreamDecoder(True), [openai_event({"choices": [{"delta": {"content": "hi"}}]})
                                              + b"data: [DONE]\n\n"])
    assert items == [Delta("hi"), Done(None, None)]


# Bedrock ConverseStream ------------------------------------------------------------------------

@st.composite
def converse_stream(draw: st.DrawFn) -> bytes:
    """A well-formed ConverseStream body, built with the project's own frame encoder."""
    frames = [encode_event("messageStart", {"role": "assistant"})]
    index = 0
    for text in draw(st.lists(st.text(max_size=8), max_size=4)):
        frames.append(encode_event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": text}}))
    if draw(st.booleans()):
        index += 1
        frames.append(encode_event("contentBlockStart", {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": "t-1", "name": draw(st.text(max_size=6))}}}))
        for fragment in draw(st.sampled_from([['{"a":', ' 1}'], ['{}'], [], ['{"x": [1, 2']])):
            frames.append(encode_event("contentBlockDelta", {"contentBlockIndex": index,
                                                             "delta": {"toolUse": {"input": fragment}}}))
        frames.append(encode_event("contentBlockStop", {"contentBlockIndex": index}))
    if draw(st.booleans()):
        frames.append(encode_exception(draw(st.sampled_from(
            ["throttlingException", "validationException", "modelTimeoutException", "internalServerException"])),
            draw(st.text(max_size=10))))
    frames.append(encode_event("messageStop", {"stopReason": "end_turn"}))
    if draw(st.booleans()):
        frames.append(encode_event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 2}}))
    return b"".join(frames)


CONVERSE_EVENTS = ["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
                   "messageStop", "metadata"]
CONVERSE_KEYS = ["delta", "text", "toolUse", "input", "contentBlockIndex", "start", "toolUseId", "name",
                 "stopReason", "usage", "inputTokens", "outputTokens", "message", "role"]
converse_shaped = json_values(text=st.sampled_from(CONVERSE_KEYS) | st.text(max_size=6), max_leaves=16)
header_values = st.one_of(st.text(max_size=12), st.binary(max_size=8), st.booleans(),
                          st.integers(-2**63, 2**63 - 1))


@st.composite
def converse_frames(draw: st.DrawFn) -> bytes:
    """Valid frames (correct CRCs) carrying random Converse events, payloads and headers."""
    frames = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["event", "exception", "headers"]))
        if kind == "event":
            payload = draw(st.dictionaries(st.sampled_from(CONVERSE_KEYS), converse_shaped, max_size=4))
            frames.append(encode_event(draw(st.sampled_from(CONVERSE_EVENTS) | st.text(max_size=8)), payload))
        elif kind == "exception":
            frames.append(encode_exception(draw(st.text(max_size=20)), draw(st.text(max_size=20))))
        else:
            headers = draw(st.dictionaries(
                st.sampled_from([":message-type", ":event-type", ":exception-type", ":error-code",
                                 ":error-message", ":content-type"]) | st.text(min_size=1, max_size=8),
                st.sampled_from(["event", "exception", "error"] + CONVERSE_EVENTS) | header_values,
                max_size=4))
            payload = draw(st.binary(max_size=30) | converse_shaped.map(
                lambda v: json.dumps(v).encode()))
            frames.append(encode_message(headers, payload))
    return b"".join(frames)


@st.composite
def forged_frame(draw: st.DrawFn) -> bytes:
    """A frame whose CRCs are right but whose lengths and header bytes are anything.

    The CRCs are what a byte flip breaks; a hostile or buggy peer computes them over
    whatever it sends, so the decoder must survive what lies behind them too.
    """
    header_bytes = draw(st.binary(max_size=24) | st.lists(st.tuples(
        st.binary(min_size=0, max_size=6), st.integers(0, 255), st.binary(max_size=6)), max_size=3).map(
        lambda hs: b"".join(struct.pack("!B", len(n)) + n + struct.pack("!B", t) + v for n, t, v in hs)))
    payload = draw(st.binary(max_size=24))
    natural = 12 + len(header_bytes) + len(payload) + 4
    total = draw(st.sampled_from(["natural"] * 4 + ["near", "any"]).flatmap(lambda mode: {
        "natural": st.just(natural), "near": st.integers(0, natural + 8),
        "any": st.integers(0, 2**32 - 1)}[mode]))
    headers_length = draw(st.sampled_from([len(header_bytes)] * 4) | st.integers(0, 2**32 - 1))
    lengths = struct.pack("!II", total, headers_length)
    body = lengths + struct.pack("!I", zlib.crc32(lengths)) + header_bytes + payload
    return body + struct.pack("!I", zlib.crc32(body))


framing_inputs = st.one_of(
    st.binary(max_size=200),
    converse_stream().flatmap(mutated),
    st.lists(forged_frame(), min_size=1, max_size=3).map(b"".join),
    st.tuples(forged_frame(), converse_stream()).map(b"".join),
).flatmap(split)


@fuzz(200)
@given(chunks=framing_inputs)
@example(chunks=[struct.pack("!II", 0, 0) + struct.pack("!I", zlib.crc32(struct.pack("!II", 0, 0)))])
def test_converse_decoder_survives_any_framing(chunks):
    """Random, mutated and forged frames: botocore's parser errors must become a Failure."""
    items = drive(ConverseStreamDecoder(), chunks)
    assert_stream_items(items, content=(str, dict))


@fuzz(200)
@given(chunks=st.one_of(converse_stream(), converse_frames(),
                        st.tuples(converse_frames(), converse_stream()).map(b"".join)).flatmap(split))
@example(chunks=[encode_event("contentBlockDelta", {"delta": "not an object"})])
@example(chunks=[encode_event("metadata", {"usage": [1]})])
def test_converse_decoder_survives_any_event_payload(chunks):
    """Well-framed events whose headers and JSON payloads are anything."""
    items = drive(ConverseStreamDecoder(), chunks)
    assert_stream_items(items, content=(str, dict))


@fuzz(200)
@given(data=st.one_of(converse_stream(), converse_stream().flatmap(mutated)).flatmap(
    lambda d: st.tuples(st.just(d), split(d))))
def test_converse_decoder_split_does_not_matter(data):
    whole, pieces = data
    assert normalised(drive(ConverseStreamDecoder(), [whole])) == \
        normalised(drive(ConverseStreamDecoder(), pieces))


@fuzz(50)
@given(stream=converse_stream())
def test_converse_valid_stream_ends_cleanly(stream):
    # the base of the mutations: valid streams end in Done, or in the exception they carry
    items = drive(ConverseStreamDecoder(), [stream])
    assert_stream_items(items, content=(str, dict))


# --- templating ---------------------------------------------------------------------------

MARK = "§"   # only credential values hold it, so finding it in a reason means a leak
NAMES = ["a", "b", "messages", "model", "x.y", "k-1", "key_2", "é", "openAI_key"]
no_mark = st.characters(blacklist_characters=MARK)
plain_text = st.text(no_mark, max_size=6)
TEMPLATE_TOKENS = ["${parameters.", "${credential.", "${", "$", "}", "{", ".toString()", ":-", ":-null",
                   ":-x}", '"', "[", "]", ",", ":", "\\", "\n", " ", "null", "1", "parameters", "credential"]


@st.composite
def placeholder(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["parameters", "credential"]))
    name = draw(st.sampled_from(NAMES) | st.text(st.sampled_from("ab_.-9 é"), min_size=1, max_size=5))
    text = f"${{{kind}.{name}{'.toString()' if draw(st.booleans()) else ''}"
    default = draw(st.none() | st.just("null") | plain_text.filter(lambda s: "}" not in s))
    if default is not None:
        text += f":-{default}"
    text += "}"
    return f'"{text}"' if draw(st.booleans()) else text


templates = st.one_of(
    st.text(no_mark, max_size=30),
    st.lists(st.sampled_from(TEMPLATE_TOKENS) | st.sampled_from(NAMES) | plain_text, max_size=20).map("".join),
    st.lists(placeholder() | st.sampled_from(TEMPLATE_TOKENS) | plain_text, max_size=8).map("".join),
    # JSON-shaped bodies, the real use of render_json_body
    st.lists(st.tuples(st.sampled_from(NAMES), placeholder() | st.sampled_from(['""', "1", "null", "[]"])),
             max_size=4).map(lambda kv: "{" + ", ".join(f'"{k}": {v}' for k, v in kv) + "}"),
)
parameter_dicts = st.dictionaries(st.sampled_from(NAMES) | plain_text,
                                  json_values(text=plain_text), max_size=6)
credential_dicts = st.dictionaries(st.sampled_from(NAMES) | plain_text,
                                   st.text(no_mark, min_size=6, max_size=12).map(lambda s: f"sk-{MARK}{s}"),
                                   max_size=4)


def assert_no_secret(error: TemplateError, credential: dict[str, str]) -> None:
    assert isinstance(error.reason, str) and error.reason
    for secret in credential.values():
        assert secret not in error.reason and secret not in str(error), (secret, error.reason)
    assert MARK not in error.reason, error.reason
    assert error.__cause__ is None or MARK not in str(error.__cause__)


@fuzz(200)
@given(template=templates, parameters=parameter_dicts, credential=credential_dicts,
       where=st.sampled_from(["url", "header Authorization", "payload"]))
@example(template="${parameters.a}", parameters={"a": float("nan")}, credential={}, where="url")
def test_render_raises_only_template_error(template, parameters, credential, where):
    try:
        out = render(template, parameters, credential, where=where)
    except TemplateError as error:
        assert_no_secret(error, credential)
        return
    assert isinstance(out, str)
    if "${" not in template:
        assert out == template


def _reject(name: str) -> None:
    raise ValueError(name)


@fuzz(200)
@given(template=templates, parameters=parameter_dicts, credential=credential_dicts)
@example(template='{"k": ${credential.a}}', parameters={}, credential={"a": "NaN"})
@example(template='{"k": "${credential.a}"}', parameters={}, credential={"a": f'sk-{MARK}"oops'})
def test_render_json_body_is_json_or_template_error(template, parameters, credential):
    try:
        body = render_json_body(template, parameters, credential)
    except TemplateError as error:
        # the one example whose credential has no MARK only needs the plain check
        assert_no_secret(error, {k: v for k, v in credential.items() if len(v) > 3})
        return
    json.loads(body, parse_constant=_reject)   # strict JSON: no NaN / Infinity either


@fuzz(150)
@given(template=templates)
def test_placeholders_raises_only_template_error(template):
    try:
        found = placeholders(template)
    except TemplateError:
        return
    assert all(kind in ("parameters", "credential") and isinstance(name, str) for kind, name in found)


# --- JSONPath -------------------------------------------------------------------------------

PATH_TOKENS = ["$", ".", "..", "[", "]", "*", "'", '"', ",", ":", "-", "?", "(", ")", "@", "\\", " ", "\t",
               "0", "1", "-1", "2:", ":3", "a", "b", "choices", "length()", "?(@.a)", "٣", "['a']", '["b"]',
               "[*]", "[0]", "[-1]", "[1:2]", "['a','b']", "[0,1]"]
long_digits = st.integers(4290, 4400).map(lambda n: "7" * n)   # past int()'s 4300-digit limit
short_expressions = st.one_of(
    st.text(max_size=20),
    st.lists(st.sampled_from(PATH_TOKENS) | st.text(max_size=3), max_size=12).map("".join),
    st.lists(st.sampled_from(PATH_TOKENS), max_size=12).map(lambda parts: "$" + "".join(parts)),
)
expressions = st.one_of(
    short_expressions,
    st.lists(st.sampled_from(PATH_TOKENS) | long_digits, max_size=6).map(lambda parts: "$" + "".join(parts)),
    st.tuples(st.sampled_from(["$[", "$[-", "$[1:", "$..[", "$[0, "]), long_digits).map(lambda t: t[0] + t[1] + "]"),
)


@fuzz(300)
@given(expression=expressions)
@example(expression="$[" + "1" * 4301 + "]")
def test_compile_path_raises_only_jsonpath_error(expression):
    try:
        path = compile_path(expression)
    except JsonPathError as error:
        assert isinstance(error.reason, str) and error.reason
        return
    assert isinstance(path, JsonPath)


@fuzz(50)
@given(value=json_values())
def test_compile_path_refuses_non_strings(value):
    if isinstance(value, str):
        return
    try:
        compile_path(value)
    except JsonPathError:
        return
    raise AssertionError(f"compile_path accepted {value!r}")


KEYS = ["a", "b", "choices", "message", "content", "0", "a b", "'q'"]
documents = json_values(text=st.sampled_from(KEYS) | st.text(max_size=4), max_leaves=20)


def quoted(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


index = st.integers(-4, 4) | st.integers(-2**70, 2**70)
step = st.one_of(
    st.sampled_from([k for k in KEYS if k.isidentifier()]).map(lambda k: "." + k),
    st.sampled_from(KEYS).map(lambda k: f"[{quoted(k)}]"),
    index.map(lambda i: f"[{i}]"),
    st.just("[*]"), st.just(".*"),
    st.sampled_from(["a", "b", "*"]).map(lambda k: ".." + k),
    index.map(lambda i: f"..[{i}]"),
    st.tuples(st.none() | index, st.none() | index).map(
        lambda s: f"[{'' if s[0] is None else s[0]}:{'' if s[1] is None else s[1]}]"),
    st.lists(st.sampled_from(KEYS), min_size=2, max_size=3).map(lambda ks: "[" + ",".join(map(quoted, ks)) + "]"),
    st.lists(index, min_size=2, max_size=3).map(lambda ns: "[" + ", ".join(map(str, ns)) + "]"),
)
valid_paths = st.lists(step, max_size=5).map(lambda steps: "$" + "".join(steps))


@fuzz(200)
@given(expression=valid_paths | short_expressions, document=documents)
def test_compiled_path_read_raises_only_path_not_found(expression, document):
    try:
        path = compile_path(expression)
    except JsonPathError:
        return
    try:
        value = path.read(document)
    except PathNotFound:
        assert path.is_definite
        return
    if not path.is_definite:
        assert isinstance(value, list)


@fuzz(200)
@given(expression=valid_paths)
def test_well_formed_paths_compile(expression):
    path = compile_path(expression)
    assert path.expression == expression


def test_floats_in_documents_are_plain_values():
    # NaN compares unequal to itself; read must hand it back, not choke on it
    assert math.isnan(compile_path("$.a").read({"a": float("nan")}))


# --- the request line and head -------------------------------------------------------------

head_lines = st.lists(st.one_of(
    st.binary(max_size=40),
    st.tuples(st.sampled_from([b"Host", b"Content-Length", b"X-A", b"Bad Name", b"", b" X"]),
              st.binary(max_size=20)).map(lambda nv: nv[0] + b":" + nv[1] + b"\r\n"),
    st.sampled_from([b"\r\n", b"\n", b" folded\r\n", b"\tfolded\r\n"]),
), max_size=8)


@given(line=st.binary(max_size=60) | st.sampled_from([b"GET / HTTP/1.1\r\n", b"GET /\r\n", b"X / HTTP/9.9\r\n"]))
def test_request_line_parses_or_raises_ours(line):
    from mlstream.wire.framing import parse_request_line

    try:
        parsed = parse_request_line(line)
    except MLStreamError:
        return
    assert parsed.version in ("HTTP/1.0", "HTTP/1.1") or parsed.version.startswith("HTTP/1.")


@given(lines=head_lines)
def test_head_lines_give_fields_or_raise_ours(lines):
    from mlstream.wire.framing import HeadLines

    head = HeadLines()
    try:
        for line in lines:
            if head.give(line):
                break
    except MLStreamError:
        return
    for name, value in head.message().items():
        assert name and "\r" not in value and "\n" not in value and "\0" not in value
    # The indexed get answers what email's own walk over the same fields answers.
    message = head.message()
    plain = HTTPMessage()
    for name, value in message.items():
        plain.set_raw(name, value)
    for name in {name for name, _ in message.items()} | {"content-length", "X-Absent"}:
        for asked in (name, name.upper(), name.lower()):
            assert message.get(asked) == plain.get(asked)
    assert message.items() == plain.items()


def _lines_of(data: bytes) -> list[bytes]:
    """``data`` cut as a reader's ``readline`` cuts it (each line with its LF), then the end of input."""
    return [line for line in data.splitlines(keepends=True) if line] + [b""]


@given(lines=head_lines, rest=st.sampled_from([b"", b"{}", b"GET / HTTP/1.1\r\n\r\n", b"X: y\r\n\r\n"]))
@example(lines=[b"Host: a\r\n", b"X-A: \t b \t\r\n", b"\r\n"], rest=b"{}")
@example(lines=[b"Host: a\n", b"\r\n"], rest=b"X: y\r\n\r\n")
@example(lines=[b"A: b\rc\r\n", b"\r\n"], rest=b"")
def test_a_head_taken_at_once_is_the_head_given_line_by_line(lines, rest):
    """``take`` either leaves the head to ``give`` (0) or takes exactly its bytes and
    finds exactly the fields that ``give`` finds, line by line, in the same bytes."""
    from mlstream.wire.framing import HeadLines

    data = b"".join(lines) + rest
    at_once = HeadLines()
    taken = at_once.take(data)
    if not taken:
        return
    by_line, used = HeadLines(), 0
    for line in _lines_of(data):
        used += len(line)
        if by_line.give(line):  # raises if give refuses: take must have refused too
            break
    assert taken == used
    assert at_once.message().items() == by_line.message().items()
    assert (at_once._lines, at_once._bytes) == (by_line._lines, by_line._bytes)


# --- the response cache's semantic split -------------------------------------------------------

CONVERSATION_KEYS = st.sampled_from(["messages", "system", "input", "prompt", "inputs", "instructions",
                                     "parameters", "role", "content", "type", "text", "temperature"])


@fuzz(300)
@given(request=st.dictionaries(CONVERSATION_KEYS, json_values(max_leaves=16), max_size=5))
def test_semantic_split_answers_a_text_and_the_rest_or_none(request: dict) -> None:
    split = semantic_split(request)
    if split is None:
        return
    text, rest = split
    assert isinstance(text, str) and text
    outer = rest.get("parameters") if "parameters" in rest and not any(f in request for f in CONVERSATION_FIELDS) \
        else rest
    assert not set(outer) & set(CONVERSATION_FIELDS)  # the conversation is in the text only
