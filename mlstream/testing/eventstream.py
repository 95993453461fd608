"""Pure encoder for the AWS event-stream binary framing (``application/vnd.amazon.eventstream``).

No I/O: headers and payload in, the bytes of one frame out. The fake Bedrock runtime
pre-encodes whole answers with it, and tests build exact frames with it. The decoder we
check it against is botocore's own ``EventStreamBuffer``.

One frame on the wire::

    +---------------------+----------------------+--------------------+
    | total length  (u32) | headers length (u32) | prelude CRC32 (u32) |   prelude, 12 bytes
    +---------------------+----------------------+--------------------+
    | headers: repeated  name-len (u8) | name | type (u8) | value       |
    +-----------------------------------------------------------------+
    | payload (opaque bytes; JSON for Bedrock)                        |
    +-----------------------------------------------------------------+
    | message CRC32 (u32) over everything above, prelude CRC included |
    +-----------------------------------------------------------------+

All integers are big-endian; the CRC is the ordinary CRC-32 of ``zlib.crc32``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = [
    "HeaderValue",
    "MAX_HEADERS_LENGTH",
    "MAX_PAYLOAD_LENGTH",
    "PRELUDE_LENGTH",
    "encode_event",
    "encode_exception",
    "encode_message",
    "encode_payload_part",
]

HeaderValue = str | bytes | bool | int

#: total length + headers length + prelude CRC, 4 bytes each.
PRELUDE_LENGTH = 12
#: The message CRC that closes every frame.
_MESSAGE_CRC_LENGTH = 4
#: Decoders refuse frames above these sizes (botocore: 128 KiB of headers, 24 MiB of
#: payload), so encoding one would only move the failure to the other side of the wire.
MAX_HEADERS_LENGTH = 128 * 1024
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024

# Header value type tags from the event-stream specification.
_TYPE_BOOL_TRUE = 0
_TYPE_BOOL_FALSE = 1
_TYPE_INT32 = 4
_TYPE_INT64 = 5
_TYPE_BYTE_ARRAY = 6
_TYPE_STRING = 7

_MAX_NAME_LENGTH = 0xFF  # the name length is one byte
_MAX_VALUE_LENGTH = 0xFFFF  # string and byte-array lengths are two bytes
_INT32_RANGE = range(-(2**31), 2**31)
_INT64_RANGE = range(-(2**63), 2**63)


def encode_message(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """Return one complete event-stream frame carrying ``headers`` and ``payload``.

    Header values map to wire types by their Python type: ``str`` → string (7),
    ``bytes`` → byte array (6), ``bool`` → true/false (0/1), ``int`` → int32 (4), or
    int64 (5) when it does not fit in 32 bits. Header order is preserved.

    Raises ``ValueError`` for a name or value too long for its length field, or a
    frame larger than decoders accept, and ``TypeError`` for any other value type.
    """
    encoded_headers = b"".join(_encode_header(name, value) for name, value in headers.items())
    if len(encoded_headers) > MAX_HEADERS_LENGTH:
        raise ValueError(f"headers are {len(encoded_headers)} bytes, more than {MAX_HEADERS_LENGTH}")
    if len(payload) > MAX_PAYLOAD_LENGTH:
        raise ValueError(f"payload is {len(payload)} bytes, more than {MAX_PAYLOAD_LENGTH}")
    total_length = PRELUDE_LENGTH + len(encoded_headers) + len(payload) + _MESSAGE_CRC_LENGTH
    lengths = struct.pack("!II", total_length, len(encoded_headers))
    prelude = lengths + struct.pack("!I", zlib.crc32(lengths))
    body = prelude + encoded_headers + payload
    return body + struct.pack("!I", zlib.crc32(body))


def encode_event(event_type: str, payload: Mapping[str, Any]) -> bytes:
    """Return an ``event`` frame of type ``event_type`` with ``payload`` as compact JSON."""
    return encode_message(
        {
            ":event-type": event_type,
            ":content-type": "application/json",
            ":message-type": "event",
        },
        _json_bytes(payload),
    )


def encode_payload_part(data: bytes) -> bytes:
    """Return a SageMaker ``PayloadPart`` event frame: ``data`` as the raw payload (the
    member is the event's payload, a blob, so no JSON around it)."""
    return encode_message(
        {":event-type": "PayloadPart", ":content-type": "application/octet-stream", ":message-type": "event"},
        data,
    )


def encode_exception(exception_type: str, message: str) -> bytes:
    """Return an ``exception`` frame, the in-band error a modeled stream error travels as.

    ``exception_type`` is the member name in the service model (for ConverseStream:
    ``modelStreamErrorException``, ``throttlingException``, ``validationException``,
    ``internalServerException``, ``serviceUnavailableException``); botocore raises it
    as ``EventStreamError`` with that code.
    """
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        _json_bytes({"message": message}),
    )


def _json_bytes(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _encode_header(name: str, value: HeaderValue) -> bytes:
    raw_name = name.encode("utf-8")
    if not 0 < len(raw_name) <= _MAX_NAME_LENGTH:
        raise ValueError(f"header name must be 1..{_MAX_NAME_LENGTH} bytes: {name!r}")
    return struct.pack("!B", len(raw_name)) + raw_name + _encode_value(name, value)


def _encode_value(name: str, value: HeaderValue) -> bytes:
    # bool first: it is a subclass of int.
    if isinstance(value, bool):
        return struct.pack("!B", _TYPE_BOOL_TRUE if value else _TYPE_BOOL_FALSE)
    if isinstance(value, int):
        if value in _INT32_RANGE:
            return struct.pack("!Bi", _TYPE_INT32, value)
        if value in _INT64_RANGE:
            return struct.pack("!Bq", _TYPE_INT64, value)
        raise ValueError(f"header {name!r}: integer {value} does not fit in 64 bits")
    if isinstance(value, str):
        return _length_prefixed(name, _TYPE_STRING, value.encode("utf-8"))
    if isinstance(value, bytes | bytearray | memoryview):
        return _length_prefixed(name, _TYPE_BYTE_ARRAY, bytes(value))
    raise TypeError(f"header {name!r}: unsupported value type {type(value).__name__}")


def _length_prefixed(name: str, type_tag: int, raw: bytes) -> bytes:
    if len(raw) > _MAX_VALUE_LENGTH:
        raise ValueError(f"header {name!r}: value is {len(raw)} bytes, more than {_MAX_VALUE_LENGTH}")
    return struct.pack("!BH", type_tag, len(raw)) + raw
