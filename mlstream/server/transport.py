"""The HTTP transport: one connection's requests, on the stdlib handler.

    head (under the header deadline) -> route -> auth, framing, JSON -> route function
    -> Reply: written whole          -> StreamReply: registered, started, SSEWriter

``BaseHTTPRequestHandler`` speaks HTTP/1.0 unless told otherwise and writes HTML
errors; here it speaks HTTP/1.1 (keep-alive, chunked) and every error, its own
protocol errors included, is the JSON body of the request's front (``routing.Front``). Request
framing and checks are pure (``mlstream.wire.framing``); a stream's bytes are the SSE
writer's. What this module owns is the socket: reading exactly the body, writing
replies, and the lifecycle of a stream on its connection.

An HTTP/1.0 client cannot read chunked framing (RFC 9112 6.1): its stream is a
close-delimited body (the bare SSE events, ``Connection: close``, then the close),
and its other replies carry Content-Length and close unless it asked for keep-alive
(the stdlib's ``close_connection`` rules).
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from .. import __version__
from ..access.keys import SCRIPT_HEADER, Authenticator, from_script
from ..access.budgets import Accountant
from ..errors import (BadRequest, ClientGone, ExpectationFailed, HeadersTooLarge, MethodNotImplemented,
                      MLStreamError, RequestTimeout, UpstreamError, URITooLong, VersionNotSupported)
from ..wire.framing import (MAX_HEAD_LINE, ChunkedDecoder, HeadLines, body_framing, check_content_type, chunked_ok,
                       declares_body, decode_content, parse_json_body, parse_request_line, request_id)
from ..logs import AccessRecord
from ..metrics import Metrics
from ..inference.predict import CallMeter
from ..caching import parse_controls
from ..providers.events import Done, Failure, StreamItem
from ..settings.server import ServerSettings
from ..store.sqlite import Store
from ..streaming.channel import Channel
from ..telemetry.hooks import RequestTrace, Telemetry
from . import responses
from .routing import Front, Reply, Request, Router, StreamReply
from .sse_writer import MODEL_ID_HEADER, SSEWriter, first_item, stream_head

log = logging.getLogger(__name__)
# The fronts under /v1, whose clients read OpenAI's x-ratelimit-* headers.
RATE_HEADER_FRONTS = frozenset({"openai", "responses", "anthropic"})

# Errors that mean the client went away; a hang-up is routine, logged at debug.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

# The stdlib's own protocol errors, by the status it chose.
_PROTOCOL_ERRORS: dict[int, type[MLStreamError]] = {
    400: BadRequest, 408: RequestTimeout, 414: URITooLong, 417: ExpectationFailed, 431: HeadersTooLarge,
    501: MethodNotImplemented, 505: VersionNotSupported,
}


class InFlightRequests(Protocol):
    def begin_request(self) -> None: ...
    def end_request(self) -> None: ...
    def add(self, channel: Channel) -> None: ...
    def discard(self, channel: Channel) -> None: ...


class Watcher(Protocol):
    def watch(self, sock: Any, channel: Channel) -> None: ...
    def unwatch(self, sock: Any) -> None: ...


class Timer(Protocol):
    def arm(self, sock: Any, seconds: float) -> int: ...
    def disarm(self, token: int) -> None: ...


class Host(Protocol):
    """What the transport needs of the server it runs in (``app.MLStreamServer``)."""

    settings: ServerSettings
    router: Router
    authenticator: Authenticator
    metrics: Metrics
    in_flight: InFlightRequests
    draining: threading.Event
    deadlines: Timer
    hangups: Watcher
    store: Store
    accountant: Accountant
    telemetry: Telemetry | None  # None: tracing off


_date: tuple[int, str] = (0, "")  # (second, its Date header value)
_SCRIPT_FIELD = SCRIPT_HEADER[0].lower()
# An answer up to this size goes out with its head in one write (one copy of it: cheap).
ONE_WRITE_BYTES = 64 * 1024


class HTTPRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # How this request asked its replies to be written; PLAIN unless it asked.
    _format: responses.ReplyFormat = responses.PLAIN
    _front: Front  # the API the request came through (set once its path is known): its errors' body
    server_version = f"mlstream/{__version__}"
    sys_version = ""
    disable_nagle_algorithm = True  # tokens are small writes; Nagle would delay them
    server: Any  # the socketserver; its ``host`` is what this handler uses

    def setup(self) -> None:
        self.host: Host = self.server.host
        # One socket timeout bounds both an idle keep-alive wait and a write that a
        # stalled client never drains.
        self.timeout = self.host.settings.client_stall_timeout
        super().setup()

    def handle_one_request(self) -> None:
        # The request line and headers must arrive within the header timeout
        # (disarmed in parse_request, once the head is in).
        self._head_deadline: int | None = self.host.deadlines.arm(
            self.connection, self.host.settings.header_timeout)
        try:
            super().handle_one_request()
        finally:
            self._disarm_head_deadline()

    def parse_request(self) -> bool:
        """The request line and head, by ``framing`` instead of the stdlib's parser
        (which goes through the email package); the same outcome otherwise: the
        attributes the stdlib sets, keep-alive from the version and ``Connection``,
        ``Expect: 100-continue`` answered. We speak HTTP/1.x only: no HTTP/0.9."""
        self.command = None
        self.request_version = self.default_request_version  # until the line parses
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        try:
            line = parse_request_line(self.raw_requestline)
            self.command, self.path, self.request_version = line.method, line.target, line.version
            head = HeadLines()
            # The whole head at once when the reader holds it (it usually came in one
            # packet with the request line), else line by line.
            taken = head.take(self.rfile.peek()) if hasattr(self.rfile, "peek") else 0
            if taken:
                self.rfile.read(taken)
            else:
                while not head.give(self.rfile.readline(MAX_HEAD_LINE + 1)):
                    pass
        except MLStreamError as exc:
            self._disarm_head_deadline()
            self.send_error(exc.http_status, str(exc))
            return False
        self._disarm_head_deadline()
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")  # never taken for a scheme-relative URL (gh-87389)
        self.headers = message = head.message()
        # What this module reads of the head, by lowercased name: a dict lookup each.
        self._fields = fields = message.first_values()
        connection = fields.get("connection")
        if connection is None:
            self.close_connection = not line.keep_alive
        else:
            tokens = {token.strip().lower() for token in connection.split(",")}
            self.close_connection = "close" in tokens or not (line.keep_alive or "keep-alive" in tokens)
        expect = fields.get("expect")
        if (line.keep_alive and expect is not None and expect.lower() == "100-continue"
                and not self.handle_expect_100()):
            return False
        return True

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self.host.deadlines.disarm(self._head_deadline)
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
        # One change-counter reading serves every cache the request looks in.
        with self.host.store.one_counter_reading():
            self._handle()

    def _handle(self) -> None:
        started = time.monotonic()
        host = self.host
        self._body_read = False
        fields = self._fields
        self._request_id = request_id(fields.get("x-request-id"))
        parts = urlsplit(self.path)
        # OpenSearch's router ignores a trailing slash (clients send ".../_predict/").
        path = (parts.path.rstrip("/") or "/") if parts.path.endswith("/") else parts.path
        self._access = AccessRecord(self.client_address[0], self.command, path, self._request_id)
        telemetry = host.telemetry
        trace: RequestTrace | None = None
        if telemetry is not None:  # the request's SERVER span, continuing the caller's traceparent
            trace = telemetry.server_request(self.command, path, self.headers, self.client_address[0],
                                             "http" if host.settings.tls_cert is None else "https", self._request_id)
        self._trace = trace
        route_label = self._route_label = "unmatched"
        request: Request | None = None
        self._meter: CallMeter | None = None
        self._front = host.router.front_of(path)
        host.in_flight.begin_request()
        try:
            query = dict(parse_qsl(parts.query, keep_blank_values=True)) if parts.query else {}
            accept_encoding = fields.get("accept-encoding")
            if query or accept_encoding:
                self._format = responses.reply_format(query, accept_encoding)
            route, params = host.router.match(self.command, path)
            route_label, self._front = route.template, route.front
            self._route_label = route_label
            self._access.model_id = params.get("model_id")
            if trace is not None:
                trace.routed(route_label, self._access.model_id)
            key = None
            if route.role != "public":
                key = host.authenticator.authenticate(fields.get("authorization"), route.role,
                                                      api_key=fields.get("x-api-key"),
                                                      from_script=from_script(fields.get(_SCRIPT_FIELD)))
            check_content_type(fields.get("content-type"), self._declares_body(), route.raw_body)
            self._meter = CallMeter(key, self._request_id, trace=trace)
            cache_control, cache_ttl = fields.get("cache-control"), fields.get("x-mlstream-cache-ttl")
            cache_namespace = fields.get("x-mlstream-cache-namespace")
            if cache_control or cache_ttl or cache_namespace:
                self._meter.cache_controls = parse_controls(cache_control, cache_ttl, cache_namespace)
            body = self._read_body()
            request = Request(self.command, path, query, body if route.raw_body else parse_json_body(body),
                              params, started, self._request_id, self._access, self.connection, caller=key,
                              meter=self._meter)
            reply = route.handler(request)
            if isinstance(reply, StreamReply):
                self._stream(reply, started)
            else:
                self._record_call(started, reply.status, "ok" if reply.status < 400 else "error")
                added = self._call_headers()
                if added:
                    reply.headers = {**reply.headers, **added}
                self._write_reply(reply)
        except CLIENT_GONE:
            self.close_connection = True
            self._record_call(started, ClientGone.http_status, "client_gone")
            log.debug("client %s went away", self.client_address[0])
        except Exception as exc:  # noqa: BLE001 - mapped to a status in one place
            if isinstance(exc, UpstreamError):
                self._access.upstream_status = exc.upstream_status
            if not self._body_read and self._declares_body():
                # Refused before its body was read: the unread bytes must not be taken
                # for the next request on this connection.
                self.close_connection = True
            reply = self._error_reply(exc)
            self._record_call(started, reply.status, "error")
            self._write_reply(reply)
        finally:
            self._format = responses.PLAIN
            duration = time.monotonic() - started
            self._access.duration_ms = duration * 1000
            if self._meter is not None:
                self._access.target = self._meter.target
            host.metrics.http_request(route_label, self.command, self._access.status, duration,
                                       self._access.model_id if request is not None and request.model_resolved
                                       else None, self._front.name)
            self._access.emit()
            if trace is not None:
                trace.end(self._access.status)
            host.in_flight.end_request()

    def _record_call(self, started: float, status: int, outcome: str, relayed: int = 0,
                     first_token_seconds: float | None = None) -> None:
        """The request's provider call in the usage records (once; nothing when none was
        admitted). Called before the answer's last byte: the client's next call sees it."""
        meter = self._meter
        if meter is None or meter.admission is None or meter.recorded:
            return
        record = meter.usage(route=self._route_label, status=status, outcome=outcome, relayed=relayed,
                             first_token_ms=None if first_token_seconds is None else first_token_seconds * 1000,
                             duration_ms=(time.monotonic() - started) * 1000)
        if record is not None:
            self.host.accountant.record(record)

    def _call_headers(self) -> dict[str, str] | None:
        """What the call adds to its answer's headers: the response cache's status (and
        ``Age`` of a hit), and OpenAI's ``x-ratelimit-*`` on the /v1 fronts when a limit applied."""
        meter = self._meter
        if meter is None:
            return None
        added = meter.cache.headers() if meter.cache is not None else {}
        if meter.admission is not None and self._front.name in RATE_HEADER_FRONTS:
            added.update(meter.admission.rate.headers())
        return added or None

    def _error_reply(self, exc: BaseException) -> Reply:
        """The error body of the front the request came through."""
        return self._front.error_reply(exc, self._format.error_trace)

    def _declares_body(self) -> bool:
        return declares_body(self._fields.get("transfer-encoding"), self._fields.get("content-length"))

    # --- request body ----------------------------------------------------------

    def _read_body(self) -> bytes:
        """Exactly the body's bytes, never one past it (the next request may follow)."""
        framing = body_framing(self._fields.get("transfer-encoding"), self._fields.get("content-length"),
                               self.host.settings.max_body_bytes)
        if framing.close_after:
            self.close_connection = True
        if framing.chunked:
            decoder = ChunkedDecoder(self.host.settings.max_body_bytes)
            while (want := decoder.want()) is not None:
                decoder.give(self.rfile.readline(want.size) if want.line else self.rfile.read(want.size))
            body = decoder.body
        else:
            body = self.rfile.read(framing.length) if framing.length else b""
        self._body_read = True
        content_encoding = self._fields.get("content-encoding") if body else None
        if content_encoding:
            # The decoded size counts against the same limit: a bomb is a 413, not memory.
            body = decode_content(body, content_encoding, self.host.settings.max_body_bytes)
        return body

    # --- responses -------------------------------------------------------------

    def _write_reply(self, reply: Reply) -> None:
        if self.host.draining.is_set():
            self.close_connection = True
        access = getattr(self, "_access", None)
        fmt = self._format
        if not reply.filterable and fmt.filter_path is not None:
            fmt = responses.without_filter(fmt)
        if isinstance(reply.body, bytes):
            payload = reply.body
        elif isinstance(reply.body, str):
            payload = reply.body.encode("utf-8")
        elif fmt is responses.PLAIN:
            payload = responses.json_bytes(reply.body)
        else:
            payload = responses.reply_payload(reply.body, fmt)
        headers = reply.headers
        if fmt.gzip:
            payload = responses.gzip_bytes(payload)
            headers = {**headers, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        # The head as send_response / send_header / end_headers would write it, built in
        # one piece (a method call and an encode per line less) and written with the body
        # in one send: one packet, one wake-up of the client, for a small answer.
        self.log_request(reply.status)
        status = reply.status
        reason = self.responses[status][0] if status in self.responses else ""
        lines = [f"{self.protocol_version} {status} {reason}\r\nServer: {self.version_string()}\r\n"
                 f"Date: {self.date_time_string()}\r\nContent-Type: {reply.content_type}\r\n"
                 f"Content-Length: {len(payload)}\r\n"]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n")
            if name.lower() == "connection":  # as send_header follows it
                if value.lower() == "close":
                    self.close_connection = True
                elif value.lower() == "keep-alive":
                    self.close_connection = False
        request_id = getattr(self, "_request_id", None)
        if request_id:
            lines.append(f"X-Request-Id: {request_id}\r\n")
        target = self._routed_to()
        if target is not None:
            lines.append(f"{MODEL_ID_HEADER}: {target}\r\n")
        if self.close_connection:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1", "strict") if self.request_version != "HTTP/0.9" else b""
        try:
            if self.command == "HEAD":
                self.wfile.write(head)
            elif len(payload) <= ONE_WRITE_BYTES:
                self.wfile.write(head + payload)
            else:
                self.wfile.write(head)
                self.wfile.write(payload)
        except CLIENT_GONE:
            self.close_connection = True
        if access is not None:
            access.status = reply.status
            access.bytes_out = len(payload)

    def _routed_to(self) -> str | None:
        """The target a router model's call went to (served, or last tried), else None."""
        meter = getattr(self, "_meter", None)
        return meter.target if meter is not None else None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own protocol errors (bad request line, headers too long...) as JSON."""
        self.close_connection = True
        reason = message or self.responses.get(code, ("error",))[0]
        error = _PROTOCOL_ERRORS.get(code, BadRequest)(reason)
        if not hasattr(self, "command") or self.command is None:
            self.command = ""
        # Until the request line parses, the stdlib assumes HTTP/0.9 and would write a
        # bare body with no status line; we never speak 0.9.
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.1"
        # Once this request's line parsed (command set), its path says whose error body it gets.
        path = urlsplit(self.path).path if self.command else ""
        router = self.host.router
        self._front = router.front_of("/" + path.lstrip("/")) if path else router.default_front
        self._write_reply(self._error_reply(error))

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header, formatted once a second rather than for every reply."""
        global _date
        if timestamp is not None:
            return super().date_time_string(timestamp)
        second = int(time.time())
        cached = _date  # one tuple, swapped whole: no lock needed
        if cached[0] != second:
            cached = _date = (second, super().date_time_string(second))
        return cached[1]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if log.isEnabledFor(logging.DEBUG):  # the stdlib calls this for every reply
            log.debug("%s %s", self.address_string(), format % args)

    # --- streams ---------------------------------------------------------------

    def _stream(self, reply: StreamReply, started: float) -> None:
        """Register the stream, start it, answer: the provider's refusal as an HTTP
        error, else a 200 event stream written by the SSE writer."""
        host = self.host
        channel = reply.stream.channel
        # Registered before the reader starts: once it runs, on the way to the first
        # token, this thread has nothing left to do but wait for it.
        host.in_flight.add(channel)
        host.hangups.watch(self.connection, channel)
        try:
            reply.stream.start()
        except BaseException:  # Overloaded: refused before anything started
            host.hangups.unwatch(self.connection)
            host.in_flight.discard(channel)
            if reply.stream.ended is not None:
                reply.stream.ended()
            raise
        access = self._access
        writer: SSEWriter | None = None
        outcome: str | None = None  # refused | completed | failed | client_gone
        try:
            heartbeat = host.settings.heartbeat_interval
            item, access.upstream_status = first_item(channel, heartbeat)
            if isinstance(item, Failure) and isinstance(item.error, ClientGone):
                outcome = "client_gone"
                return  # nobody to answer
            if isinstance(item, Failure):
                outcome = "refused"
                host.metrics.upstream_failure(item.error)
                if isinstance(item.error, UpstreamError):
                    access.upstream_status = item.error.upstream_status
                error_reply = self._error_reply(item.error)
                self._record_call(started, error_reply.status, "error")
                self._write_reply(error_reply)
                return
            chunked = chunked_ok(self.request_version)
            if not chunked or host.draining.is_set():
                # Without chunks only the close tells an HTTP/1.0 client the body ended.
                self.close_connection = True
            gzip = self._format.gzip  # only when asked: then every event is flushed as it goes
            head = stream_head(self.version_string(), self.date_time_string(), self._request_id,
                               chunked=chunked, close=self.close_connection, gzip=gzip, model_id=self._routed_to(),
                               extra=self._call_headers())
            access.status = 200
            meter = self._meter

            def on_end(last: StreamItem) -> None:
                if meter is None or meter.admission is None:
                    return
                if isinstance(last, Done):
                    meter.tokens, outcome = last.tokens or meter.tokens, "ok"
                else:
                    gone = isinstance(last, Failure) and isinstance(last.error, ClientGone)
                    outcome = "client_gone" if gone else "error"
                events = writer.events if writer is not None else 0
                first = writer.first_event_seconds if writer is not None else None
                if first is None and events:  # the first event goes out in this last write
                    first = time.monotonic() - started
                self._record_call(started, 200, outcome, events, first)

            writer = SSEWriter(self.wfile.write, chunked=chunked, heartbeat=heartbeat, started=started,
                               gzip=gzip, events=reply.events, on_end=on_end)
            writer.run(channel, item, head)
            outcome = writer.outcome
        except CLIENT_GONE as exc:
            self.close_connection = True
            log.debug("client %s left mid-stream (%r)", self.client_address[0], exc)
        finally:
            host.hangups.unwatch(self.connection)
            if outcome is None:
                outcome = "client_gone"
                channel.cancel()  # stops the reader and closes the upstream connection
            if outcome == "client_gone":
                access.status = access.status or ClientGone.http_status
                self.close_connection = True
                self._record_call(started, access.status, "client_gone", writer.events if writer is not None else 0,
                                  writer.first_event_seconds if writer is not None else None)
            host.in_flight.discard(channel)
            if reply.stream.ended is not None:
                reply.stream.ended()
            if writer is not None and writer.failure is not None:
                host.metrics.upstream_failure(writer.failure)
            events = writer.events if writer is not None else 0
            first = writer.first_event_seconds if writer is not None else None
            host.metrics.stream_finished(outcome, events, first, self._front.name)
            if self._trace is not None:
                self._trace.stream_ended(outcome, writer.failure if writer is not None else None)
            if outcome != "refused":
                access.bytes_out = writer.bytes_out if writer is not None else 0
                access.events = events
                access.first_event_ms = None if first is None else first * 1000
