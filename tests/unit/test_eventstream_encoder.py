"""The event-stream encoder, checked against botocore's decoder and published frames."""

from __future__ import annotations

import json
from unittest import mock

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.parsers import EventStreamJSONParser

from mlstream.testing.eventstream import (
    MAX_PAYLOAD_LENGTH,
    PRELUDE_LENGTH,
    encode_event,
    encode_exception,
    encode_message,
)

# Frames published with botocore's own decoder tests: (headers, payload, exact bytes).
EXACT_FRAMES = [
    pytest.param({}, b"", b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff", id="empty"),
    pytest.param(
        {},
        b"{'foo':'bar'}",
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96",
        id="payload-no-headers",
    ),
    pytest.param(
        {"content-type": "application/json"},
        b"{'foo':'bar'}",
        b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10"
        b"application/json{'foo':'bar'}\x8d\x9c\x08\xb1",
        id="one-string-header",
    ),
    pytest.param(
        {":message-type": "error", ":error-code": "code", ":error-message": "message"},
        b"",
        b"\x00\x00\x00\x52\x00\x00\x00\x42\xbf\x23\x63\x7e"
        b"\x0d:message-type\x07\x00\x05error"
        b"\x0b:error-code\x07\x00\x04code"
        b"\x0e:error-message\x07\x00\x07message"
        b"\x6b\x6c\xea\x3d",
        id="three-string-headers",
    ),
    pytest.param(
        {"integer": -1},
        b"",
        b"\x00\x00\x00\x1d\x00\x00\x00\r\x83\xe3\xf0\xe7\x07integer\x04\xff\xff\xff\xff\x8b\x8e\x12\xeb",
        id="int32-negative",
    ),
    pytest.param(
        {"event-id": 0xA00C},
        b"{'foo':'bar'}",
        b"\x00\x00\x00+\x00\x00\x00\x0e4\x8b\xec{\x08event-id\x04\x00\x00\xa0\x0c{'foo':'bar'}\xd3\x89\x02\x85",
        id="int32-with-payload",
    ),
]


@pytest.mark.parametrize("headers, payload, expected", EXACT_FRAMES)
def test_encodes_published_frames_byte_for_byte(headers, payload, expected):
    assert encode_message(headers, payload) == expected


ROUND_TRIPS = [
    pytest.param({}, b"", id="empty"),
    pytest.param({":event-type": "messageStart"}, b'{"role":"assistant"}', id="string-header"),
    pytest.param({"yes": True, "no": False}, b"", id="bools"),
    pytest.param({"small": 7, "negative": -(2**31), "top": 2**31 - 1}, b"x", id="int32-bounds"),
    pytest.param({"big": 2**40, "low": -(2**63)}, b"x", id="int64"),
    pytest.param({"blob": b"\x00\xff\x10"}, b"\x00\x01\x02", id="bytes-header-binary-payload"),
    pytest.param({"text": "ünïcødé ✓"}, "Grüße".encode(), id="utf8"),
    pytest.param({"a": "1", "b": True, "c": 3, "d": b"4"}, b"{}", id="mixed"),
]


@pytest.mark.parametrize("headers, payload", ROUND_TRIPS)
def test_round_trips_through_botocore(headers, payload):
    frame = encode_message(headers, payload)
    buffer = EventStreamBuffer()
    buffer.add_data(frame)
    (message,) = list(buffer)
    assert message.headers == headers
    assert message.payload == payload
    assert message.prelude.total_length == len(frame)


@pytest.mark.parametrize("headers, payload", ROUND_TRIPS)
def test_decodes_when_split_at_every_offset(headers, payload):
    frame = encode_message(headers, payload)
    for offset in range(len(frame) + 1):
        buffer = EventStreamBuffer()
        buffer.add_data(frame[:offset])
        early = list(buffer)
        buffer.add_data(frame[offset:])
        late = list(buffer)
        messages = early + late
        assert len(messages) == 1, f"split at {offset}"
        assert messages[0].headers == headers
        assert messages[0].payload == payload
        assert early == [] or offset == len(frame)


def test_many_frames_back_to_back_decode_in_order():
    frames = [encode_event("contentBlockDelta", {"delta": {"text": f"t{i}"}}) for i in range(50)]
    buffer = EventStreamBuffer()
    # Feed in awkward 7-byte pieces, as a network might.
    stream = b"".join(frames)
    decoded = []
    for start in range(0, len(stream), 7):
        buffer.add_data(stream[start : start + 7])
        decoded += list(buffer)
    assert [json.loads(m.payload)["delta"]["text"] for m in decoded] == [f"t{i}" for i in range(50)]


CORRUPTIONS = [
    pytest.param(0, id="total-length"),
    pytest.param(5, id="headers-length"),
    pytest.param(9, id="prelude-crc"),
    pytest.param(PRELUDE_LENGTH + 2, id="header-name"),
    pytest.param(-10, id="payload"),
    pytest.param(-1, id="message-crc"),
]


@pytest.mark.parametrize("offset", CORRUPTIONS)
def test_a_corrupted_byte_fails_botocores_crc_check(offset):
    frame = bytearray(encode_event("contentBlockDelta", {"delta": {"text": "Hamlet"}, "contentBlockIndex": 0}))
    frame[offset] ^= 0x01
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(frame))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


def test_every_single_bit_flip_is_caught():
    frame = encode_message({":event-type": "x", "n": 1}, b'{"a":1}')
    for offset in range(len(frame)):
        corrupted = bytearray(frame)
        corrupted[offset] ^= 0x80
        buffer = EventStreamBuffer()
        buffer.add_data(bytes(corrupted))
        with pytest.raises(ChecksumMismatch):
            list(buffer)


def test_encode_event_headers_and_json_payload():
    buffer = EventStreamBuffer()
    buffer.add_data(encode_event("messageStop", {"stopReason": "end_turn"}))
    (message,) = list(buffer)
    assert message.headers == {
        ":event-type": "messageStop",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(message.payload) == {"stopReason": "end_turn"}


def test_encode_exception_headers_and_message():
    buffer = EventStreamBuffer()
    buffer.add_data(encode_exception("throttlingException", "slow down"))
    (message,) = list(buffer)
    assert message.headers == {
        ":exception-type": "throttlingException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    assert json.loads(message.payload) == {"message": "slow down"}


def _converse_stream_events(*frames: bytes) -> EventStream:
    """botocore's own EventStream over the ConverseStream output shape, fed our frames."""
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model("ConverseStream").output_shape.members["stream"]
    raw = mock.Mock()
    raw.stream = lambda: iter(frames)
    return EventStream(raw, shape, EventStreamJSONParser(), "ConverseStream")


def test_botocore_parses_encoded_events_into_the_bedrock_shape():
    events = list(
        _converse_stream_events(
            encode_event("messageStart", {"role": "assistant", "p": "abc"}),
            encode_event("contentBlockDelta", {"delta": {"text": "Hi"}, "contentBlockIndex": 0}),
            encode_event("metadata", {"usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}}),
        )
    )
    assert events == [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "Hi"}, "contentBlockIndex": 0}},
        {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}}},
    ]


def test_botocore_raises_an_encoded_exception_as_the_modeled_error():
    events = _converse_stream_events(
        encode_event("messageStart", {"role": "assistant"}),
        encode_exception("modelStreamErrorException", "boom"),
    )
    iterator = iter(events)
    assert next(iterator) == {"messageStart": {"role": "assistant"}}
    with pytest.raises(EventStreamError) as caught:
        next(iterator)
    assert caught.value.response["Error"] == {"Code": "modelStreamErrorException", "Message": "boom"}


REFUSALS = [
    pytest.param({"n" * 256: "v"}, b"", ValueError, id="name-too-long"),
    pytest.param({"": "v"}, b"", ValueError, id="empty-name"),
    pytest.param({"s": "v" * 65536}, b"", ValueError, id="string-too-long"),
    pytest.param({"b": b"v" * 65536}, b"", ValueError, id="bytes-too-long"),
    pytest.param({"i": 2**63}, b"", ValueError, id="int-beyond-64-bits"),
    pytest.param({"f": 1.5}, b"", TypeError, id="float-unsupported"),
    pytest.param({}, b"x" * (MAX_PAYLOAD_LENGTH + 1), ValueError, id="payload-too-large"),
]


@pytest.mark.parametrize("headers, payload, error", REFUSALS)
def test_refuses_what_a_decoder_could_not_read(headers, payload, error):
    with pytest.raises(error):
        encode_message(headers, payload)
