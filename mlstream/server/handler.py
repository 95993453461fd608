"""HTTP/1.1 plumbing on the stdlib handler: parse, dispatch, write, relay streams.

``BaseHTTPRequestHandler`` speaks HTTP/1.0 unless told otherwise and writes HTML
errors; here it speaks HTTP/1.1 (keep-alive, chunked) and every error, its own
protocol errors included, is the JSON body of ``responses.error_reply``.

An HTTP/1.0 client cannot read chunked framing (RFC 9112 6.1): its stream is a
close-delimited body (the bare SSE events, ``Connection: close``, then the close),
and its other replies carry Content-Length and close unless it asked for keep-alive
(the stdlib's ``close_connection`` rules).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from .. import __version__
from ..errors import BadRequest, MLStreamError, PayloadTooLarge, UnsupportedMediaType, UpstreamError
from ..logs import AccessRecord
from ..streaming.channel import Channel
from ..streaming.events import Delta, Done, Failure, Started
from . import responses
from .handlers import Request
from .hangups import ClientGone
from .responses import Reply

if TYPE_CHECKING:
    from .app import MLStreamServer

log = logging.getLogger(__name__)

# Errors that mean the client went away; a hang-up is routine, logged at debug.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)
# Chunk-size lines and trailers of a chunked request body are short; a longer line
# is a broken or hostile client.
MAX_CHUNK_LINE = 4096
# Trailers come after the header deadline is disarmed, so they are bounded like a
# head: no more lines than the stdlib allows headers (http.client._MAXHEADERS), and a
# total far above any real trailer section (a checksum or two) but far below memory.
MAX_TRAILER_LINES = 100
MAX_TRAILER_BYTES = 16 * 1024
# Events already queued are written together (each still its own HTTP chunk), so a
# fast provider costs one syscall per batch instead of one per token.
MAX_BATCH_EVENTS = 64

# Deep enough for any connector or predict body; deeper is an attack on our memory or
# on a recursive walker downstream.
MAX_JSON_DEPTH = 100
MAX_REQUEST_ID = 128
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]+")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOLERATED_MEDIA = frozenset({"application/json", "application/x-www-form-urlencoded", "text/json"})

_PROTOCOL_ERROR_TYPES = {
    400: "illegal_argument_exception", 408: "timeout_exception", 414: "too_long_http_line_exception",
    431: "too_long_http_header_exception", 501: "method_not_allowed_exception",
    505: "illegal_argument_exception",
}


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


class NotImplementedCoding(MLStreamError):
    http_status = 501
    error_type = "illegal_argument_exception"


class TrailersTooLarge(MLStreamError):
    http_status = 431
    error_type = "too_long_http_header_exception"


def _request_id(presented: str | None) -> str:
    """The client's X-Request-Id if it is a sane token, else a fresh one."""
    if presented and len(presented) <= MAX_REQUEST_ID and _REQUEST_ID.fullmatch(presented):
        return presented
    return uuid.uuid4().hex


def _check_content_type(content_type: str | None, has_body: bool) -> None:
    """Bodies are JSON. Tolerated: no Content-Type, any JSON type, and curl's default
    for ``-d`` (form-urlencoded), which ml-commons users send all the time."""
    if not has_body or not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _TOLERATED_MEDIA or media.endswith("+json"):
        return
    raise UnsupportedMediaType(f"Content-Type header [{content_type}] is not supported: send JSON "
                               "with Content-Type: application/json")


def _chunked_ok(request_version: str) -> bool:
    """Whether the client speaks HTTP/1.1 or later, so may be sent a chunked body.

    ``parse_request`` has checked the form (``HTTP/<digits>.<digits>``, not 0.9).
    """
    major, _, minor = request_version.removeprefix("HTTP/").partition(".")
    try:
        return (int(major), int(minor)) >= (1, 1)
    except ValueError:
        return False


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked iteratively (no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


class HTTPRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"mlstream/{__version__}"
    sys_version = ""
    disable_nagle_algorithm = True  # tokens are small writes; Nagle would delay them
    server: "MLStreamServer"

    def setup(self) -> None:
        # One socket timeout bounds both an idle keep-alive wait and a write that a
        # stalled client never drains.
        self.timeout = self.server.app.settings.client_stall_timeout
        super().setup()

    def handle_one_request(self) -> None:
        # The request line and headers must arrive within the header timeout
        # (disarmed in parse_request, once the head is in).
        self._head_deadline: int | None = self.server.deadlines.arm(
            self.connection, self.server.app.settings.header_timeout)
        try:
            super().handle_one_request()
        finally:
            self._disarm_head_deadline()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._disarm_head_deadline()
        if parsed and self.request_version == "HTTP/0.9":
            # A request line without a version: the stdlib would answer HTTP/0.9 style,
            # a bare body with no status line. We speak HTTP/1.x only.
            self.send_error(400, "Bad request version: HTTP/0.9 is not supported")
            return False
        return parsed

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self.server.deadlines.disarm(self._head_deadline)
            self._head_deadline = None

    # every method goes through the routing table (which answers 404 / 405)
    def do_GET(self) -> None: self._dispatch()
    def do_POST(self) -> None: self._dispatch()
    def do_PUT(self) -> None: self._dispatch()
    def do_DELETE(self) -> None: self._dispatch()
    def do_HEAD(self) -> None: self._dispatch()
    def do_PATCH(self) -> None: self._dispatch()
    def do_OPTIONS(self) -> None: self._dispatch()

    def _dispatch(self) -> None:
        started = time.monotonic()
        app = self.server.app
        self._body_read = False
        self._request_id = _request_id(self.headers.get("X-Request-Id"))
        parts = urlsplit(self.path)
        self._access = AccessRecord(self.client_address[0], self.command, parts.path, self._request_id)
        route_label = "unmatched"
        app.in_flight.begin_request()
        try:
            route, params = app.router.match(self.command, parts.path)
            route_label = route.template
            self._access.model_id = params.get("model_id")
            if route.role != "public":
                app.authenticator.authenticate(self.headers.get("Authorization"), route.role)
            _check_content_type(self.headers.get("Content-Type"), self._declares_body())
            request = Request(self.command, parts.path, dict(parse_qsl(parts.query, keep_blank_values=True)),
                              parse_json_body(self._read_body()), params, started, self._request_id,
                              self._access)
            if getattr(route.handler, "writes_response", False):
                route.handler(request, self)
            else:
                self._write_reply(route.handler(request))
        except CLIENT_GONE:
            self.close_connection = True
            log.debug("client %s went away", self.client_address[0])
        except Exception as exc:  # noqa: BLE001 - mapped to a status in one place
            if isinstance(exc, UpstreamError):
                self._access.upstream_status = exc.upstream_status
            if not self._body_read and self._declares_body():
                # Refused before its body was read: the unread bytes must not be taken
                # for the next request on this connection.
                self.close_connection = True
            self._write_reply(responses.error_reply(exc))
        finally:
            duration = time.monotonic() - started
            self._access.duration_ms = duration * 1000
            app.metrics.http_request(route_label, self.command, self._access.status, duration)
            self._access.emit()
            app.in_flight.end_request()

    def _declares_body(self) -> bool:
        return ("Transfer-Encoding" in self.headers
                or self.headers.get("Content-Length", "0").strip() not in ("", "0"))

    # --- request body ----------------------------------------------------------

    def _read_body(self) -> bytes:
        body = self._read_raw_body()
        self._body_read = True
        return body

    def _read_raw_body(self) -> bytes:
        limit = self.server.app.settings.max_body_bytes
        transfer_encoding = self.headers.get("Transfer-Encoding")
        if transfer_encoding is not None:
            codings = [coding.strip().lower() for coding in transfer_encoding.split(",")]
            if codings[-1] != "chunked":
                # RFC 9112 6.1: the body's length is unknowable; answer 400 and close.
                self.close_connection = True
                raise BadRequest(f"Transfer-Encoding [{transfer_encoding}] must end with chunked")
            if codings != ["chunked"]:
                self.close_connection = True
                raise NotImplementedCoding(f"Transfer-Encoding [{transfer_encoding}] is not supported: "
                                           "send the body chunked or with a Content-Length")
            if "Content-Length" in self.headers:
                # Both framings: read it chunked, but never trust this connection again.
                self.close_connection = True
            return self._read_chunked(limit)
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            return b""
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise BadRequest(f"invalid Content-Length [{length_text}]") from None
        if length > limit:
            self.close_connection = True  # the unread body would be taken for the next request
            raise PayloadTooLarge(f"request body of {length} bytes exceeds the limit of {limit} bytes")
        return self.rfile.read(length)

    def _read_chunked(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(MAX_CHUNK_LINE + 1)
            if len(line) > MAX_CHUNK_LINE or not line.endswith(b"\n"):
                self.close_connection = True
                raise BadRequest("malformed chunked request body")
            size_text = line.split(b";", 1)[0].strip()
            # Strictly hex digits: int(x, 16) would also take "-1", "0x10" or "1_0".
            if not _CHUNK_SIZE.fullmatch(size_text):
                self.close_connection = True
                raise BadRequest("malformed chunk size in chunked request body")
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                self.close_connection = True
                raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
            parts.append(self.rfile.read(size))
            if self.rfile.read(2) != b"\r\n":
                self.close_connection = True
                raise BadRequest("malformed chunked request body")
        self._skip_trailers()
        return b"".join(parts)

    def _skip_trailers(self) -> None:
        """Read the trailer section up to its blank line; trailers are ignored."""
        lines = 0
        total = 0
        while True:
            line = self.rfile.readline(MAX_CHUNK_LINE + 1)
            if line in (b"\r\n", b"\n", b""):
                return
            if len(line) > MAX_CHUNK_LINE:
                self.close_connection = True
                raise BadRequest("malformed chunked request trailer")
            lines += 1
            total += len(line)
            if lines > MAX_TRAILER_LINES or total > MAX_TRAILER_BYTES:
                # The rest of the section is unread: this connection cannot be reused.
                self.close_connection = True
                raise TrailersTooLarge(f"chunked request trailers exceed {MAX_TRAILER_LINES} lines "
                                       f"or {MAX_TRAILER_BYTES} bytes")

    # --- responses -------------------------------------------------------------

    def _write_reply(self, reply: Reply) -> None:
        if self.server.app.draining.is_set():
            self.close_connection = True
        access = getattr(self, "_access", None)
        if isinstance(reply.body, str):
            payload = reply.body.encode("utf-8")
        else:
            # A protocol error can come before the request line gave us a path.
            pretty = "pretty" in urlsplit(getattr(self, "path", "")).query
            payload = responses.json_bytes(reply.body, pretty=pretty)
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            request_id = getattr(self, "_request_id", None)
            if request_id:
                self.send_header("X-Request-Id", request_id)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except CLIENT_GONE:
            self.close_connection = True
        if access is not None:
            access.status = reply.status
            access.bytes_out = len(payload)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own protocol errors (bad request line, headers too long...) as JSON."""
        self.close_connection = True
        reason = message or self.responses.get(code, ("error",))[0]
        error = MLStreamError(reason, status=code)
        error.error_type = _PROTOCOL_ERROR_TYPES.get(code, "illegal_argument_exception")
        if not hasattr(self, "command") or self.command is None:
            self.command = ""
        # Until the request line parses, the stdlib assumes HTTP/0.9 and would write a
        # bare body with no status line; we never speak 0.9.
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.1"
        self._write_reply(Reply(code, error.to_body()))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    # --- streams ---------------------------------------------------------------

    def relay(self, channel: Channel, started: float) -> None:
        """Drain ``channel`` into an SSE response: chunked for HTTP/1.1, close-delimited
        for an HTTP/1.0 client (which cannot read chunks; the close ends its body).

        The status line waits for the provider: its error becomes our HTTP error,
        its 2xx headers commit a 200. After that, failures are a final error event.
        """
        app = self.server.app
        app.in_flight.add(channel)
        self.server.hangups.watch(self.connection, channel)
        chunks = 0
        bytes_out = 0
        first_chunk: float | None = None
        outcome: str | None = None  # None while the stream is still open
        access = self._access
        try:
            heartbeat = app.settings.heartbeat_interval
            # Before the provider's headers: wait silently, a failure is still a status.
            item = channel.get(None)
            if isinstance(item, Started):
                access.upstream_status = item.status
                # Headers are in; the first frame usually follows at once. Holding the
                # status line until then (at most one heartbeat interval) lets an error
                # frame that opens the stream (Bedrock throttling, an OpenAI error event)
                # still be a proper HTTP status.
                item = channel.get(heartbeat)
            if isinstance(item, Failure) and isinstance(item.error, ClientGone):
                return  # nobody to answer
            if isinstance(item, Failure):
                outcome = "refused"
                app.metrics.upstream_failure(item.error)
                if isinstance(item.error, UpstreamError):
                    access.upstream_status = item.error.upstream_status
                self._write_reply(responses.error_reply(item.error))
                return
            # The framing is chosen once per stream, so the per-event path stays one call.
            chunked = _chunked_ok(self.request_version)
            frame, end = (responses.chunk, responses.LAST_CHUNK) if chunked else (responses.unframed, b"")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Accel-Buffering", "no")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Request-Id", self._request_id)
            if not chunked or app.draining.is_set():
                # Without chunks only the close tells an HTTP/1.0 client the body ended.
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            access.status = 200
            write = self.wfile.write
            while True:
                if item is None:
                    write(frame(responses.HEARTBEAT))
                    item = channel.get(heartbeat)
                    continue
                batch: list[bytes] = []
                while item is not None:
                    if isinstance(item, Delta):
                        batch.append(frame(responses.content_event(item.content)))
                        chunks += 1
                    elif isinstance(item, Done):
                        batch.append(frame(responses.last_event(item.finish_reason, item.usage)))
                        batch.append(end)
                        outcome = "completed"
                    elif isinstance(item, Failure):
                        # A client that only shut its sending side still reads: end the
                        # body properly for it (for one that is gone, the write just fails).
                        outcome = "client_gone" if isinstance(item.error, ClientGone) else "failed"
                        if outcome == "failed":
                            app.metrics.upstream_failure(item.error)
                        batch.append(frame(responses.error_event(item.error)))
                        batch.append(end)
                    if outcome is not None or len(batch) >= MAX_BATCH_EVENTS:
                        break
                    item = channel.get_nowait()
                data = b"".join(batch)
                write(data)
                bytes_out += len(data)
                if first_chunk is None and chunks:
                    first_chunk = time.monotonic() - started
                if outcome is not None:
                    return
                item = channel.get(heartbeat)
        except CLIENT_GONE as exc:
            self.close_connection = True
            log.debug("client %s left mid-stream (%r)", self.client_address[0], exc)
        finally:
            self.server.hangups.unwatch(self.connection)
            if outcome is None:
                outcome = "client_gone"
                channel.cancel()  # stops the reader and closes the upstream connection
            if outcome == "client_gone":
                access.status = access.status or 499  # nginx's "client closed request"
                self.close_connection = True
            app.in_flight.discard(channel)
            app.metrics.stream_finished(outcome, chunks, first_chunk)
            if outcome != "refused":
                access.bytes_out = bytes_out
                access.events = chunks
                access.first_event_ms = None if first_chunk is None else first_chunk * 1000
