"""Request framing, pure: the request line and head, how long a body is, its chunked
decoding, its JSON, its checks.

No sockets here (h11's manner): the transport asks what to read, reads exactly
that, and hands the bytes back. ``ChunkedDecoder`` says whether it wants a line
(a chunk size or a trailer, with its bound) or a number of data bytes, so the
transport never reads past the body into a pipelined next request.

    line = parse_request_line(rfile.readline(MAX_HEAD_LINE + 1))
    head = HeadLines()
    while not head.give(rfile.readline(MAX_HEAD_LINE + 1)): pass
    headers = head.message()
    framing = body_framing(transfer_encoding, content_length, limit)
    chunked:  decoder = ChunkedDecoder(limit)
              while (want := decoder.want()) is not None:
                  decoder.give(rfile.readline(want.size) if want.line else rfile.read(want.size))
              raw = decoder.body
    length:   raw = rfile.read(framing.length)
    raw = decode_content(raw, content_encoding, limit)   # only when Content-Encoding is sent
    body = parse_json_body(raw)

Every limit is a named constant with its reason. Errors are ``errors`` classes
with their status; any of them while a body is unread means the connection
cannot be trusted again, which the transport handles.
"""

from __future__ import annotations

import json
import os
import random
import re
import zlib
from dataclasses import dataclass
from http.client import HTTPMessage
from collections.abc import Mapping
from typing import Any

from ..errors import (BadRequest, HeadersTooLarge, NotImplementedCoding, PayloadTooLarge, ProtocolError, TrailersTooLarge,
                     UnsupportedMediaType, VersionNotSupported)

# Content codings undone on one request body: each may inflate up to the body limit, so
# a long list ("gzip, gzip, ...") would multiply the work; clients send one.
MAX_CONTENT_CODINGS = 2
# A request head is bounded as http.client bounds one (_MAXLINE, _MAXHEADERS): a longer
# line or more lines is a 431. The same bounds hold for a provider's answer head.
MAX_HEAD_LINE = 65536
MAX_HEAD_LINES = 100
# ... and the whole head, folded lines included, is bounded far below what 100 lines of
# 64 KiB would allow: real heads are a few kilobytes (OpenSearch's default is 16 KiB).
MAX_HEAD_BYTES = 256 * 1024
# Chunk-size lines and trailer lines are short; a longer line is a broken or hostile client.
MAX_CHUNK_LINE = 4096
# Trailers come after the header deadline is disarmed, so they are bounded like a head:
# no more lines than the stdlib allows headers (http.client._MAXHEADERS), and a total far
# above any real trailer section (a checksum or two) but far below memory.
MAX_TRAILER_LINES = 100
MAX_TRAILER_BYTES = 16 * 1024
# Deep enough for any connector or predict body; deeper is an attack on our memory or on
# a recursive walker downstream.
MAX_JSON_DEPTH = 100
MAX_REQUEST_ID = 128

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]+")
# Fresh request ids: 128 bits from a generator seeded from the OS once (again in a
# forked child). Not uuid4: its os.urandom lets go of the GIL at the start of every
# request, and then waits to take it back behind whichever thread took it.
_IDS = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _IDS.seed(os.urandom(32)))
# RFC 9110 §5.6.2: a field name (and a method) is a token.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9112 §2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_END_OF_HEAD = (b"\r\n", b"\n", b"")
# A field line in its usual shape: token ":" value CRLF, the value free of NUL, CR and LF,
# its surrounding spaces and tabs outside the group (what HeadLines.give makes of it).
_FIELD_LINE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00\r\n]*?)[ \t]*\r\n", re.MULTILINE)
# Strictly hex digits: int(x, 16) would also take "-1", "0x10" or "1_0".
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS = re.compile(r"[0-9]+")
_TOLERATED_MEDIA = frozenset({"application/json", "application/x-www-form-urlencoded", "text/json"})
# zlib's window bits per content coding (RFC 9110 8.4.1): gzip's wrapper, and "deflate"
# as the zlib format; a raw deflate stream (what some clients send) is tried second.
_GZIP_WBITS = 31
_ZLIB_WBITS = 15
_RAW_DEFLATE_WBITS = -15
# Compressed members in one gzip body; real clients send one.
MAX_GZIP_MEMBERS = 16


# What a request target may not hold (as http.client refuses): controls, space, DEL.
_TARGET_REFUSED = re.compile(r"[\x00-\x20\x7f]")
# What a field value may not hold on the way out: CR, LF, NUL (no obs-fold either).
_VALUE_REFUSED = re.compile(r"[\r\n\x00]")
_FRAMING_FIELDS = frozenset({"content-length", "transfer-encoding"})


def host_field(host: str, port: int, default_port: int) -> str:
    """The Host field for ``host``:``port`` (RFC 9112 §3.2): an IPv6 address in
    brackets, the port left out when it is the scheme's default."""
    name = f"[{host}]" if ":" in host else host
    return name if port == default_port else f"{name}:{port}"


def request_head(method: str, target: str, host: str, fields: Mapping[str, str], body_length: int,
                 user_agent: str) -> bytes:
    """An HTTP/1.1 request head, as http.client would write it for a bytes body.

    The request line; ``Host`` unless ``fields`` has one; the fields in order, but
    for their own framing (``Content-Length``, ``Transfer-Encoding``: the body is sent
    whole, so its length is the one framing); ``Content-Length`` for a body (or a
    POST, PUT, PATCH); then ``User-Agent`` and ``Accept-Encoding: identity`` unless
    given. A method or field
    name that is not a token, a target with a control character or space, or a
    value with CR, LF or NUL (a parameter smuggling a header line), or not latin-1,
    is refused, naming the field and never its value (it may be a credential).
    """
    if not _TOKEN.fullmatch(method.encode("latin-1", "replace")):
        raise BadRequest(f"the provider request's method [{method}] is not an HTTP token")
    if not target or _TARGET_REFUSED.search(target):
        raise BadRequest("the provider request's path holds a space or a control character")
    lines = [f"{method} {target} HTTP/1.1"]
    given = {name.lower() for name in fields}
    if "host" not in given:
        lines.append(f"Host: {host}")
    for name, value in fields.items():
        if name.lower() in _FRAMING_FIELDS:
            continue
        if not _TOKEN.fullmatch(name.encode("latin-1", "replace")):
            raise BadRequest(f"the provider request's header name [{name}] is not an HTTP token")
        if _VALUE_REFUSED.search(value):
            raise BadRequest(f"the provider request's header [{name}] holds a line break or NUL")
        lines.append(f"{name}: {value}")
    if body_length or method.upper() in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {body_length}")
    if "user-agent" not in given:
        lines.append(f"User-Agent: {user_agent}")
    if "accept-encoding" not in given:
        lines.append("Accept-Encoding: identity")
    lines.append("\r\n")
    try:
        return "\r\n".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise BadRequest("the provider request's target or a header is not latin-1 text") from None


@dataclass(frozen=True, slots=True)
class RequestLine:
    method: str
    target: str
    version: str          # "HTTP/1.1", "HTTP/1.0"
    keep_alive: bool      # HTTP/1.1 or later: persistent unless the head says close


def parse_request_line(raw: bytes) -> RequestLine:
    """``method SP target SP HTTP/x.y``, its line end included or not.

    Words are split on ASCII whitespace (RFC 9112 §3 allows it). HTTP/0.9 (no
    version) is refused, as is any version we do not speak.
    """
    words = raw.split()
    if len(words) == 2:
        raise BadRequest("Bad request version: HTTP/0.9 is not supported")
    if len(words) != 3:
        raise BadRequest(f"Bad request syntax ({_shown(raw)})")
    method, target, version = words
    if not _TOKEN.fullmatch(method):
        raise BadRequest(f"Bad request method ({_shown(method)})")
    match = _VERSION.fullmatch(version)
    if match is None or match.group(1) == b"0":
        raise BadRequest(f"Bad request version ({_shown(version)})")
    if match.group(1) != b"1":
        raise VersionNotSupported(f"Invalid HTTP version ({_shown(version)})")
    return RequestLine(method.decode("ascii"), target.decode("latin-1"), version.decode("ascii"),
                       keep_alive=match.group(2) != b"0")


def _value(raw: bytes, name: str) -> str:
    value = raw.strip(b" \t\r\n")
    if b"\0" in value or b"\r" in value or b"\n" in value:
        raise BadRequest(f"Bad header value for [{name}]: NUL, CR or LF")
    return value.decode("latin-1")


def _shown(raw: bytes) -> str:
    return repr(raw[:100].decode("latin-1"))


class HeadLines:
    """The field lines of a head, fed one line at a time (as read, line end included).

    ``give`` returns True once the head is complete: its empty line, or the end of
    the input. Bounds: ``MAX_HEAD_LINE`` bytes a line (read ``MAX_HEAD_LINE + 1`` to
    notice a longer one), ``MAX_HEAD_LINES`` lines and ``MAX_HEAD_BYTES`` in all (folded
    lines count), else HeadersTooLarge. A line that is not ``token ":" value``, or a
    value with a NUL, CR or LF, is a BadRequest (RFC 9110 §5.5) that names the field or
    the line's number, never its text (it may be a credential). A folded line (obsolete,
    RFC 9112 §5.2) continues the value before it. Values are stripped of surrounding
    whitespace and read as Latin-1, as http.client does.

    This replaces the stdlib's head parser (``http.client.parse_headers``), which
    goes through the email package: a tenth of a millisecond on every request.
    ``take`` reads a whole head at once from what a reader has buffered, when every
    line of it has the usual shape (a fraction of the work of ``give`` line by line).
    """

    __slots__ = ("_fields", "_lines", "_bytes")

    def __init__(self) -> None:
        self._fields: list[tuple[str, str]] = []
        self._lines = 0
        self._bytes = 0

    def take(self, buffered: bytes) -> int:
        """The whole head at once from ``buffered`` (a reader's next bytes, e.g. its
        ``peek()``): how many of them it takes, its empty line included; the caller
        consumes exactly those. 0 (nothing taken) unless nothing was given yet, the head
        ends inside ``buffered`` (CRLF CRLF) and every line is ``token ":" value CRLF``
        with no NUL, CR or LF in the value, within the bounds: then ``give``, line by
        line, decides as always (the same fields, the same errors)."""
        if self._lines:
            return 0
        if buffered.startswith(b"\r\n"):
            return 2  # no fields at all
        end = buffered.find(b"\r\n\r\n")
        if end < 0 or end + 2 > MAX_HEAD_LINE:
            return 0
        block = buffered[:end + 2]
        fields = _FIELD_LINE.findall(block)
        # Each match is one whole line (from a line's start to its CRLF, nothing in
        # between can end a line): as many matches as line ends means every line matched.
        if len(fields) != block.count(b"\n") or len(fields) > MAX_HEAD_LINES:
            return 0
        self._fields = [(name.decode("ascii"), value.decode("latin-1")) for name, value in fields]
        self._lines, self._bytes = len(fields), len(block)
        return end + 4

    def give(self, line: bytes) -> bool:
        if line in _END_OF_HEAD:
            return True
        if len(line) > MAX_HEAD_LINE:
            raise HeadersTooLarge("Line too long: a header line is longer than 65536 bytes")
        self._lines += 1
        self._bytes += len(line)
        if self._lines > MAX_HEAD_LINES:
            raise HeadersTooLarge(f"Too many headers: more than {MAX_HEAD_LINES} lines")
        if self._bytes > MAX_HEAD_BYTES:
            raise HeadersTooLarge(f"Headers too large: more than {MAX_HEAD_BYTES} bytes")
        folded = line[:1] in (b" ", b"\t")
        if folded and self._fields:  # obsolete line folding: one SP instead (RFC 9112 §5.2)
            name, value = self._fields.pop()
            self._fields.append((name, f"{value} {_value(line, name)}".strip()))
            return False
        name_bytes, colon, raw = line.partition(b":")
        if folded or not colon or not _TOKEN.fullmatch(name_bytes):
            raise BadRequest(f"Bad header line {self._lines}: not a 'name: value' field")
        name = name_bytes.decode("ascii")
        self._fields.append((name, _value(raw, name)))
        return False

    def message(self) -> HTTPMessage:
        """The fields as the stdlib's header object (case-insensitive ``get``, ``get_all``)."""
        return IndexedMessage(self._fields)


class IndexedMessage(HTTPMessage):
    """The stdlib's header object, its ``get`` (and ``[]``) a dict lookup, ``items`` a copy.

    email's ``get`` walks every field, lowercasing each name, and a request asks
    for a dozen headers on its way through. The first value of each name is kept, as
    ``get`` returns; any change to the fields (``set_raw``, ``del``, ...) drops the
    index and ``get`` falls back to the walk. The values are latin-1 text (no
    surrogates), which email's compat32 policy would return unchanged.
    """

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__()
        self._headers = list(fields)
        # the first value of each name wins: built from the last field to the first
        self._first: dict[str, str] | None = {name.lower(): value for name, value in reversed(fields)}
        self._indexed = len(fields)

    def first_values(self) -> Mapping[str, str]:
        """Each field's first value by its lowercased name, as ``get`` answers (a dict
        lookup instead of a method call, for a reader of many fields)."""
        if self._first is not None and len(self._headers) == self._indexed:
            return self._first
        return {name.lower(): value for name, value in reversed(self._headers)}

    def get(self, name: str, failobj: Any = None) -> Any:  # type: ignore[override]
        if self._first is not None and len(self._headers) == self._indexed:
            return self._first.get(name.lower(), failobj)
        return super().get(name, failobj)

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        # urllib3 copies a provider answer's head through items(); email's runs each
        # value through its policy, which returns our (surrogate-free) values unchanged.
        if self._first is not None and len(self._headers) == self._indexed:
            return list(self._headers)
        return super().items()

    # The changes that can leave the count as it was (a del then a set, a replace).
    def __delitem__(self, name: str) -> None:
        self._first = None
        super().__delitem__(name)

    def replace_header(self, _name: str, _value: Any) -> None:
        self._first = None
        super().replace_header(_name, _value)


@dataclass(frozen=True, slots=True)
class Framing:
    """How a request body is delimited."""

    chunked: bool = False
    length: int = 0             # for a Content-Length body
    close_after: bool = False   # both framings were sent: never trust this connection again


def body_framing(transfer_encoding: str | None, content_length: str | None, limit: int) -> Framing:
    """The body's framing from its two headers (RFC 9112 6.1-6.3), within ``limit`` bytes."""
    if transfer_encoding is not None:
        codings = [coding.strip().lower() for coding in transfer_encoding.split(",")]
        if codings[-1] != "chunked":
            # The body's length is unknowable; answer 400 and close.
            raise BadRequest(f"Transfer-Encoding [{transfer_encoding}] must end with chunked")
        if codings != ["chunked"]:
            raise NotImplementedCoding(f"Transfer-Encoding [{transfer_encoding}] is not supported: "
                                       "send the body chunked or with a Content-Length")
        return Framing(chunked=True, close_after=content_length is not None)
    if content_length is None:
        return Framing()
    # ASCII digits only (RFC 9110 8.6): int() would also take "1_0", "+5" or "٣", and two
    # parsers disagreeing on a body's length is how requests are smuggled.
    # Only HTTP's optional whitespace around it (str.strip would also take "\x1f", which int() refuses).
    value = content_length.strip(" \t")
    if not _DIGITS.fullmatch(value):
        raise BadRequest(f"invalid Content-Length [{content_length}]")
    length = int(value)
    if length > limit:
        raise PayloadTooLarge(f"request body of {length} bytes exceeds the limit of {limit} bytes")
    return Framing(length=length)


@dataclass(frozen=True, slots=True)
class Want:
    """What the decoder needs next: a line of at most ``size`` bytes, or ``size`` bytes."""

    line: bool
    size: int


_LINE = Want(True, MAX_CHUNK_LINE + 1)
_CRLF = Want(False, 2)


class ChunkedDecoder:
    """A chunked body (RFC 9112 7.1), fed exactly what ``want()`` asks for."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._total = 0
        self._want: Want | None = _LINE
        self._in_trailers = False
        self._trailer_lines = 0
        self._trailer_bytes = 0

    def want(self) -> Want | None:
        """What to read next; None once the body and its trailers are complete."""
        return self._want

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    def give(self, data: bytes) -> None:
        want = self._want
        if want is None:
            raise ValueError("the chunked body is complete")
        if not want.line:
            self._data(want, data)
        elif self._in_trailers:
            self._trailer(data)
        else:
            self._size_line(data)

    def _size_line(self, line: bytes) -> None:
        if len(line) > MAX_CHUNK_LINE or not line.endswith(b"\n"):
            raise BadRequest("malformed chunked request body")
        size_text = line.split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise BadRequest("malformed chunk size in chunked request body")
        size = int(size_text, 16)
        if size == 0:
            self._in_trailers = True
            self._want = _LINE
            return
        self._total += size
        if self._total > self._limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {self._limit} bytes")
        self._want = Want(False, size)

    def _data(self, want: Want, data: bytes) -> None:
        if want is _CRLF:
            if data != b"\r\n":
                raise BadRequest("malformed chunked request body")
            self._want = _LINE
            return
        if len(data) != want.size:
            raise BadRequest("malformed chunked request body")
        self._parts.append(data)
        self._want = _CRLF

    def _trailer(self, line: bytes) -> None:
        if line in (b"\r\n", b"\n", b""):
            self._want = None
            return
        if len(line) > MAX_CHUNK_LINE:
            raise BadRequest("malformed chunked request trailer")
        self._trailer_lines += 1
        self._trailer_bytes += len(line)
        if self._trailer_lines > MAX_TRAILER_LINES or self._trailer_bytes > MAX_TRAILER_BYTES:
            raise TrailersTooLarge(f"chunked request trailers exceed {MAX_TRAILER_LINES} lines "
                                   f"or {MAX_TRAILER_BYTES} bytes")


def parse_json_body(raw: bytes) -> Any:
    """The request's JSON, or None for an empty body."""
    if not raw.strip():
        return None
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("request body is not valid UTF-8") from None
    except RecursionError:
        raise BadRequest(f"request body is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise BadRequest(f"Failed to parse request body as JSON: {exc}") from None
    # Cheap pre-check: a body with fewer brackets than the limit cannot exceed it.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(body) > MAX_JSON_DEPTH:
        raise BadRequest(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked iteratively (no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def request_id(presented: str | None) -> str:
    """The client's X-Request-Id if it is a sane token, else a fresh one."""
    if presented and len(presented) <= MAX_REQUEST_ID and _REQUEST_ID.fullmatch(presented):
        return presented
    return f"{_IDS.getrandbits(128):032x}"


def check_content_type(content_type: str | None, has_body: bool, ndjson: bool = False) -> None:
    """Bodies are JSON. Tolerated: no Content-Type, any JSON type, and curl's default
    for ``-d`` (form-urlencoded), which ml-commons users send all the time; and where
    ``ndjson`` (``_bulk``), OpenSearch's ``application/x-ndjson``."""
    if not has_body or not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _TOLERATED_MEDIA or media.endswith("+json") or (ndjson and media == "application/x-ndjson"):
        return
    raise UnsupportedMediaType(f"Content-Type header [{content_type}] is not supported: send JSON "
                               "with Content-Type: application/json")


def declares_body(transfer_encoding: str | None, content_length: str | None) -> bool:
    return transfer_encoding is not None or (content_length or "0").strip() not in ("", "0")


def chunked_ok(request_version: str) -> bool:
    """Whether the client speaks HTTP/1.1 or later, so may be sent a chunked body.

    The request line's version has been checked for form (``HTTP/<digits>.<digits>``).
    """
    major, _, minor = request_version.removeprefix("HTTP/").partition(".")
    try:
        return (int(major), int(minor)) >= (1, 1)
    except ValueError:
        return False


def decode_content(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """The body under its ``Content-Encoding`` (``gzip``, ``deflate``, ``identity``; a list is
    undone last first), never more than ``limit`` bytes: a decompression bomb is refused
    as soon as its output passes the limit, before it can take the memory."""
    codings = [coding.strip().lower() for coding in content_encoding.split(",") if coding.strip()]
    if len([coding for coding in codings if coding != "identity"]) > MAX_CONTENT_CODINGS:
        raise UnsupportedMediaType(f"Content-Encoding [{content_encoding[:100]}] stacks more than "
                                   f"{MAX_CONTENT_CODINGS} codings")
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            raw = _inflate(raw, _GZIP_WBITS, limit, coding)
        elif coding == "deflate":
            try:
                raw = _inflate(raw, _ZLIB_WBITS, limit, coding)
            except _NotThisFormat:
                raw = _inflate(raw, _RAW_DEFLATE_WBITS, limit, coding)
        else:
            raise UnsupportedMediaType(f"Content-Encoding [{content_encoding}] is not supported: "
                                       "send gzip, deflate or identity")
    return raw


class _NotThisFormat(Exception):
    """The first bytes are not the wrapper this decoder expects."""


def _inflate(data: bytes, wbits: int, limit: int, coding: str) -> bytes:
    out: list[bytes] = []
    total = 0
    for member in range(MAX_GZIP_MEMBERS):
        decoder = zlib.decompressobj(wbits)
        try:
            # At most one byte past the limit: enough to know it was passed.
            part = decoder.decompress(data, limit - total + 1)
        except zlib.error:
            if member == 0 and wbits == _ZLIB_WBITS:
                raise _NotThisFormat from None
            raise BadRequest(f"request body is not valid {coding} data") from None
        total += len(part)
        if total > limit or decoder.unconsumed_tail:
            raise PayloadTooLarge(f"request body decompresses to more than the limit of {limit} bytes")
        out.append(part)
        if not decoder.eof:
            raise BadRequest(f"request body is truncated {coding} data")
        data = decoder.unused_data
        if not data or wbits != _GZIP_WBITS:
            if data:
                raise BadRequest(f"request body has bytes after its {coding} data")
            return b"".join(out)
    raise BadRequest(f"request body has more than {MAX_GZIP_MEMBERS} gzip members")


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` admits gzip (RFC 9110 12.5.3): ``gzip`` (or ``x-gzip``)
    with a q-value above zero, else ``*`` so; a named coding wins over ``*``."""
    if not accept_encoding:
        return False
    qualities: dict[str, float] = {}
    for item in accept_encoding.lower().split(","):
        coding, _, params = item.partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        qualities[coding.strip()] = quality
    for coding in ("gzip", "x-gzip", "*"):
        if coding in qualities:
            return qualities[coding] > 0
    return False


class ChunkedBody:
    """A chunked response body (RFC 9112 7.1) fed as it arrives, in pieces of any size.

    ``feed`` returns the data of every chunk the bytes complete or continue, as one
    bytes (often empty: only framing arrived); ``done`` turns true once the last chunk
    and its trailer section are in. Pure: the reader of a provider's stream takes
    every chunk that has arrived in one read this way, where http.client's ``read1``
    returns one chunk per call (and a provider sends one event per chunk).

    Size lines are read as http.client reads them (``int(size, 16)`` of what precedes
    a ``;``), so the same bodies are accepted. ``ProtocolError`` for a size that is not
    a number, a chunk not followed by CRLF, or a line or trailer section past the
    limits of request bodies (``MAX_CHUNK_LINE``, ``MAX_TRAILER_BYTES``).
    """

    __slots__ = ("_buffer", "_left", "_crlf", "_trailers", "_trailer_bytes", "done")

    def __init__(self, chunk_left: int | None = None) -> None:
        # ``chunk_left`` is the state a reader that went before left, in http.client's
        # terms: None at a size line, 0 after a chunk's data (its CRLF still to come),
        # n > 0 inside a chunk with n data bytes to come.
        self._buffer = b""
        self._left = chunk_left or 0          # data bytes of the current chunk still to come
        self._crlf = chunk_left is not None   # the current chunk's CRLF is still to come
        self._trailers = False
        self._trailer_bytes = 0
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        buf = self._buffer + data if self._buffer else data
        end_of_buf = len(buf)
        parts: list[bytes] = []
        pos = 0
        # The state in locals for the loop (a provider sends one event per chunk: this
        # runs per token), written back once at the end.
        left, crlf, trailers = self._left, self._crlf, self._trailers
        while pos < end_of_buf:
            if left:
                take = min(left, end_of_buf - pos)
                parts.append(buf[pos:pos + take])
                pos += take
                left -= take
                continue
            if crlf:
                if end_of_buf - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ProtocolError("a chunk of the body is not followed by CRLF")
                pos += 2
                crlf = False
                continue
            line_end = buf.find(b"\n", pos)
            if line_end < 0:
                if end_of_buf - pos > MAX_CHUNK_LINE:
                    raise ProtocolError(f"a chunk size line longer than {MAX_CHUNK_LINE} bytes")
                break
            line = buf[pos:line_end]
            pos = line_end + 1
            if trailers:
                if line in (b"", b"\r"):
                    self.done = True
                    break
                self._trailer_bytes += len(line) + 1
                if self._trailer_bytes > MAX_TRAILER_BYTES:
                    raise ProtocolError(f"chunked trailers longer than {MAX_TRAILER_BYTES} bytes")
                continue
            if len(line) > MAX_CHUNK_LINE:
                raise ProtocolError(f"a chunk size line longer than {MAX_CHUNK_LINE} bytes")
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError("a chunk size that is not a hexadecimal number") from None
            if size < 0:
                raise ProtocolError("a negative chunk size")
            if size == 0:
                trailers = True
                continue
            data_end = pos + size
            if data_end + 2 <= end_of_buf:  # the whole chunk is here, its CRLF too: taken at once
                if buf[data_end:data_end + 2] != b"\r\n":
                    raise ProtocolError("a chunk of the body is not followed by CRLF")
                parts.append(buf[pos:data_end])
                pos = data_end + 2
            else:
                left, crlf = size, True
        self._left, self._crlf, self._trailers = left, crlf, trailers
        self._buffer = buf[pos:] if pos < end_of_buf and not self.done else b""
        return parts[0] if len(parts) == 1 else b"".join(parts)
