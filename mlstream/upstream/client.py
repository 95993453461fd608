"""The one HTTP client for every provider call: pooled urllib3 connections.

``ProviderCall`` is one call to a provider: the rendered request, the connector
(client config, credentials, signing) and its retry policy. It opens the
response (signing each attempt afresh, retrying what is worth retrying), reads
it, and turns every failure into our own error. Foreign errors are translated
here and only here, at the boundary, into ``UpstreamError`` / ``UpstreamTimeout``
naming only the host (a URL's path or query may carry a key). Redirects are
never followed and urllib3 never retries on its own: retrying is the call's
decision, made only before anything was relayed.
"""

from __future__ import annotations

import errno
import functools
import http.client
import ipaddress
import json
import logging
import math
import os
import socket
import ssl
import tempfile
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import parse_url
from urllib3.util.ssl_match_hostname import CertificateError
from urllib3.exceptions import (ConnectTimeoutError, HTTPError, NameResolutionError, NewConnectionError,
                                ProtocolError, ReadTimeoutError, SSLError)

from .. import __version__
from .aws_credentials import AwsCredentials
from .body import SocketBody, socket_body
from ..models.connectors import ClientConfig, Connector, UpstreamRequest
from ..models.tls import TlsMaterial
from ..settings.endpoints import is_private, private_host_message
from ..errors import EndpointRefused, MLStreamError, UpstreamError, UpstreamOverloaded, UpstreamTimeout
from ..providers.common import MAX_RESPONSE_BYTES
from ..wire.framing import MAX_HEAD_LINE, ChunkedBody, HeadLines, host_field, request_head
from ..redaction import redact
from .retry import RetryPolicy, parse_retry_after, send_with_retries
from .signing import sign_request
from ..speedups import chunked_read, header_dict, raw_read1, whole_read
from ..telemetry.hooks import CallTrace

# A guard for secrets, so set wherever this client is loaded, not only by the command
# line: urllib3 logs each request's URL at DEBUG, and a connector URL may carry a key
# in its query. (Its warnings are noise here too: with block=False a burst beyond a
# connector's max_connection opens extra connections, and urllib3 warns for each one
# it then discards, which is intended.)
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
log = logging.getLogger(__name__)
# A connector with skip_ssl_verification is warned of once, when its pool is made
# (_tls_options), not on every request as urllib3 would.
warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)

# The most of an error body we read to find the provider's message.
MAX_ERROR_BODY_BYTES = 64 * 1024


# How mlstream names itself to providers.
USER_AGENT = f"mlstream/{__version__}"

# Interim (1xx) answers skipped before a provider's real answer; more is a broken server.
MAX_INTERIM_ANSWERS = 8


class ProviderResponse(http.client.HTTPResponse):
    """http.client's response, its head read by ``framing.HeadLines`` rather than by
    the email package (a tenth of a millisecond on every call). The rest of ``begin``
    decides what http.client decides: framing (chunked or a length), keep-alive."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        for _ in range(MAX_INTERIM_ANSWERS + 1):
            version, status, reason = self._read_status()  # type: ignore[attr-defined]
            if status != http.client.CONTINUE:
                break
            self._read_head()  # an interim answer's head: skipped
        else:
            raise http.client.HTTPException(f"more than {MAX_INTERIM_ANSWERS} interim answers")
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = self._read_head()
        self.chunked = (self.headers.get("transfer-encoding") or "").lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()  # type: ignore[attr-defined]
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked and length.strip().isdigit():
            self.length = int(length)
        if status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED) or status < 200 or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True  # the body ends when the connection does

    def _read_head(self) -> http.client.HTTPMessage:
        head = HeadLines()
        try:
            # the whole head at once when it came with the status line (it usually does)
            taken = head.take(self.fp.peek()) if hasattr(self.fp, "peek") else 0
            if taken:
                self.fp.read(taken)
            else:
                while not head.give(self.fp.readline(MAX_HEAD_LINE + 1)):
                    pass
        except MLStreamError as exc:
            raise http.client.HTTPException(f"the provider's answer head is malformed: {exc}") from None
        return head.message()


class _GuardedConnectionMixin:
    """Connects only to public addresses, and to exactly the address it checked.

    The host is resolved once here; every address is checked, and the socket is
    opened to one of those same addresses (TLS still verifies and sends SNI for the
    host name). Checking a name and then letting the connection resolve it again
    would leave a DNS-rebinding window between the two.
    """

    host: str
    port: int
    _dns_host: str

    def _new_conn(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self._dns_host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc  # type: ignore[arg-type]
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        if any(is_private(ipaddress.ip_address(address.split("%")[0])) for address in addresses):
            raise EndpointRefused(private_host_message(self.host))
        name, last_error = self._dns_host, None
        try:
            for address in addresses:
                self._dns_host = address
                try:
                    return super()._new_conn()  # type: ignore[misc]
                except NewConnectionError as exc:
                    last_error = exc
            raise last_error or NewConnectionError(self, "no address to connect to")  # type: ignore[arg-type]
        finally:
            self._dns_host = name


class GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class GuardedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = GuardedHTTPConnection


class GuardedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = GuardedHTTPSConnection


# Connection pools kept at once (one per provider host, connector limits and private
# rule); past this the least recently used is closed, as urllib3's PoolManager does.
MAX_POOLS = 64
# Parsed provider URLs remembered (a connector's URL repeats on every call).
MAX_TARGETS = 4096

_PoolKey = tuple[str, str, int, int, bool, "TlsMaterial | None"]  # scheme, host, port, max_connection,
#                                                              allow_private, TLS beyond the defaults
_POOL_CLASSES: dict[tuple[str, bool], type[HTTPConnectionPool]] = {
    ("http", False): GuardedHTTPConnectionPool, ("https", False): GuardedHTTPSConnectionPool,
    ("http", True): HTTPConnectionPool, ("https", True): HTTPSConnectionPool,
}


class UpstreamClient:
    """Connection pools keyed by provider host, ``max_connection`` and whether private
    addresses are allowed.

    The pools are kept here rather than in a urllib3 PoolManager: its per-request URL
    parsing and pool-key building cost about a seventh of a provider call's time to
    its headers (0.05 ms of 0.38 warm, 0.14 of 0.89 after an idle pause), on the
    path to every first token. Each pool is still urllib3's own.
    """

    def __init__(self) -> None:
        # Guards changes to the pools and the parsed URLs: dict work and creating a pool
        # (which opens nothing); evicted pools are closed after it is released. A
        # parsed URL is looked up without it (one dict lookup, atomic).
        self._lock = threading.Lock()
        self._pools: OrderedDict[_PoolKey, HTTPConnectionPool] = OrderedDict()
        self._targets: dict[str, tuple[str, str, int, str]] = {}  # url -> scheme, host, port, path
        self.aws_credentials = AwsCredentials()  # for aws_sigv4 connectors

    def send(self, request: UpstreamRequest, config: ClientConfig, *,
             allow_private: bool = False, tls: TlsMaterial | None = None) -> urllib3.BaseHTTPResponse:
        """Send ``request``; the response body is left unread (read it, then release).
        ``tls``: the connector's TLS beyond the defaults (a pool of its own)."""
        try:
            pool, path = self._route(request.url, config.max_connection, allow_private, tls)
            return _exchange_on(pool, request, path, config)
        except Exception as exc:
            raise translate_error(exc, request.url) from exc

    def read_body(self, response: urllib3.BaseHTTPResponse, url: str,
                  limit: int = MAX_RESPONSE_BYTES) -> bytes:
        """Read a whole (bounded) body and give the connection back to the pool."""
        try:
            body = whole_read(response, limit)
            if body is None:
                body = response.read(limit + 1)
            if len(body) > limit:
                response.close()
                raise UpstreamError(f"the provider's answer is larger than {limit} bytes")
            return body
        except UpstreamError:
            raise
        except Exception as exc:
            response.close()
            raise translate_error(exc, url) from exc
        finally:
            response.release_conn()

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()

    def _route(self, url: str, max_connection: int, allow_private: bool,
               tls: TlsMaterial | None = None) -> tuple[HTTPConnectionPool, str]:
        """The pool for ``url``'s origin and the request target (path and query) to send it."""
        target = self._targets.get(url)
        if target is None:
            parsed = parse_url(url)
            scheme = (parsed.scheme or "http").lower()
            if scheme not in ("http", "https") or not parsed.host:
                raise UpstreamError(f"cannot call {_host(url)}: only http and https URLs with a host",
                                    kind="connection")
            target = (scheme, parsed.host, parsed.port or (443 if scheme == "https" else 80), parsed.request_uri)
        scheme, host, port, path = target
        key = (scheme, host, port, max_connection, allow_private, tls if scheme == "https" else None)
        evicted: list[HTTPConnectionPool] = []
        with self._lock:
            if len(self._targets) >= MAX_TARGETS:
                self._targets.clear()
            self._targets[url] = target
            pool = self._pools.get(key)
            if pool is None:
                # block=False: a burst past max_connection opens extra connections
                # rather than waiting; they are closed instead of pooled afterwards.
                pool = self._pools[key] = _POOL_CLASSES[(scheme, allow_private)](
                    host, port, maxsize=max_connection, block=False, **_tls_options(key[5], host))
                while len(self._pools) > MAX_POOLS:
                    evicted.append(self._pools.popitem(last=False)[1])
            else:
                self._pools.move_to_end(key)
        for old in evicted:  # a connection still lent out is closed when it comes back
            old.close()
        return pool, path


def _tls_options(tls: TlsMaterial | None, host: str) -> dict[str, Any]:
    """The HTTPS pool's options for a connector's TLS (none for the defaults)."""
    if tls is None:
        return {}
    if not tls.verify:
        log.warning("TLS certificate verification is off for the provider at %s (skip_ssl_verification)", host)
        return {"ssl_context": _tls_context(tls), "cert_reqs": "CERT_NONE", "assert_hostname": False}
    return {"ssl_context": _tls_context(tls), "cert_reqs": "CERT_REQUIRED"}


@functools.lru_cache(maxsize=64)
def _tls_context(tls: TlsMaterial) -> ssl.SSLContext:
    """One context per distinct TLS material: its trust, and its client certificate."""
    context = ssl.create_default_context(cadata=tls.ca_pem) if tls.ca_pem else ssl.create_default_context()
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_pem and tls.key_pem:
        # The ssl module loads a certificate chain only from files: a private directory,
        # removed as soon as the context holds them.
        with tempfile.TemporaryDirectory(prefix="mlstream-tls-") as directory:
            os.chmod(directory, 0o700)
            cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
            for path, text in ((cert_path, tls.cert_pem), (key_path, tls.key_pem)):
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w", encoding="ascii") as file:
                    file.write(text)
            context.load_cert_chain(cert_path, key_path)
    return context


class ProviderCall:
    """One call to a provider, from sending the request to the last byte of its answer."""

    def __init__(self, client: UpstreamClient, request: UpstreamRequest, connector: Connector, *,
                 allow_private: bool,
                 on_retry: Callable[[int], None] = lambda status: None,
                 trace: CallTrace | None = None) -> None:
        self._client = client
        self.request = request
        self._connector = connector
        self._allow_private = allow_private
        self._on_retry = on_retry if trace is None else _both(on_retry, trace.retried)
        # This call's span and metrics (telemetry), None when tracing is off: every use
        # below is one ``if``.
        self.trace = trace
        # The secret parts of the AWS credentials this call was signed with: they may not
        # be the connector's own (a role, the server's chain), and an AWS error echoes
        # what it was signed with (the session token in a canonical request).
        self._signing_secrets: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return self.request.url

    def open(self, wait: Callable[[float], bool]) -> urllib3.BaseHTTPResponse:
        """The provider's response, its body unread when streaming.

        Retries per the connector's ``client_config``; ``wait(seconds)`` pauses
        between attempts and returns False if the caller went away meanwhile.
        Raises only MLStreamError.
        """
        if self.trace is not None:
            return self.trace.open(self._open, wait)
        return self._open(wait)

    def _open(self, wait: Callable[[float], bool]) -> urllib3.BaseHTTPResponse:
        try:
            return send_with_retries(self._send, RetryPolicy.from_config(self._connector.client_config),
                                     wait, self._on_retry)
        except MLStreamError:
            raise
        except Exception as exc:  # e.g. draining a refused answer before a retry
            raise translate_error(exc, self.url) from exc

    def read_body(self, response: urllib3.BaseHTTPResponse) -> bytes:
        """The whole (bounded) body; the connection goes back to the pool."""
        if self.trace is not None:
            return self.trace.read_whole(self._read_whole, response)
        return self._read_whole(response)

    def _read_whole(self, response: urllib3.BaseHTTPResponse) -> bytes:
        return self._client.read_body(response, self.url)

    def error(self, response: urllib3.BaseHTTPResponse, payload: bytes | None = None) -> UpstreamError:
        """A non-2xx answer as our error, the provider's message redacted of credentials."""
        if payload is None:
            payload = self.read_body(response)
        return error_from_response(response.status, payload, self.url, self._secrets(), response.headers)

    def redacted(self, error: MLStreamError) -> MLStreamError:
        """``error`` with this call's credentials taken out of its reason: a provider's
        message inside a 2xx stream (an error event, an exception frame) may echo them."""
        reason = redact(error.reason, self._secrets())
        if reason != error.reason:
            error.reason = reason
            error.args = (reason,)
        if self.trace is not None:  # every failure of a stream passes here on its way to the client
            self.trace.failed(error)
        return error

    def _secrets(self) -> list[str]:
        return [*self._connector.credential.values(), *self._signing_secrets]

    def body_reader(self, response: urllib3.BaseHTTPResponse) -> Callable[[int], bytes]:
        """``read(size)``: what has arrived of the streamed body (b"" at its end),
        raising only MLStreamError."""
        read1 = raw_read1(response)
        url = self.url

        def read(size: int) -> bytes:
            try:
                return read1(size)
            except Exception as exc:
                raise translate_error(exc, url) from exc

        return read

    def bulk_body_reader(self, response: urllib3.BaseHTTPResponse) -> Callable[[int], bytes]:
        """As ``body_reader``, but every chunk that has arrived of a chunked body in one
        read (``speedups.chunked_read``); from its first call on, the body is read only
        through it (``speedups.body_ready`` no longer applies)."""
        read_chunks = chunked_read(response, ChunkedBody)
        if read_chunks is None:
            return self.body_reader(response)
        url = self.url

        def read(size: int) -> bytes:
            try:
                return read_chunks(size)
            except MLStreamError:
                raise
            except Exception as exc:
                raise translate_error(exc, url) from exc

        return read

    def socket_body(self, response: urllib3.BaseHTTPResponse) -> SocketBody | None:
        """The rest of the streamed body, read without blocking (``upstream.body``); None
        when it cannot be (then ``bulk_body_reader``). From here on the body is read
        only through it."""
        url = self.url
        return socket_body(response, lambda exc: translate_error(exc, url))

    def failure(self, exc: BaseException) -> MLStreamError:
        """Any exception met while relaying this call, as our error."""
        return translate_error(exc, self.url)

    def finish(self, response: urllib3.BaseHTTPResponse, *, reusable: bool) -> None:
        """Give the connection back to the pool if the body was read cleanly, else close it:
        the stream is over."""
        try:
            if reusable:
                response.drain_conn()  # the terminating chunk after [DONE]
            else:
                response.close()
        finally:
            response.release_conn()
            if self.trace is not None:
                self.trace.finished()

    def _send(self) -> urllib3.BaseHTTPResponse:
        request = self.request
        if self.trace is not None:  # this call's traceparent, before the request is signed
            request = self.trace.attempt(request)
        if self._connector.protocol == "aws_sigv4":
            # Per attempt: the signature is timestamped, and credentials may have been refreshed.
            credentials = self._client.aws_credentials.for_connector(self._connector)
            self._signing_secrets = tuple(value for value in (credentials.secret_key, credentials.token) if value)
            request = sign_request(request, self._connector, credentials)
        return self._client.send(request, self._connector.client_config, allow_private=self._allow_private,
                                 tls=self._connector.tls)


def _both(first: Callable[[int], None], then: Callable[[int], None]) -> Callable[[int], None]:
    def both(status: int) -> None:
        first(status)
        then(status)
    return both


def _exchange_on(pool: HTTPConnectionPool, request: UpstreamRequest, target: str,
                 config: ClientConfig) -> urllib3.HTTPResponse:
    """One request on one of ``pool``'s connections, to the provider's response head.

    What ``pool.urlopen(retries=False, redirect=False, preload_content=False)`` does,
    less its layers: urllib3's connection (a pooled one checked for a drop, or a new
    one: the endpoint guard, TLS), our head and body in one write (one packet, one
    wake-up of the provider), http.client's response read by ``ProviderResponse``,
    and urllib3's response around it, which gives the connection back to the pool
    once read. Those layers (URL parsing, header objects, request state) cost about
    a third of a millisecond after an idle pause, on the way to every first token.
    Errors are urllib3's, as urlopen raises them (``translate_error`` reads them).
    """
    body = request.body or b""
    # Built (and checked) before a connection is taken: a refused head costs no connection.
    host = host_field(pool.host.rstrip("."), pool.port, pool.ConnectionCls.default_port)
    data = request_head(request.method, target, host, request.headers, len(body), USER_AGENT) + body
    conn = pool._get_conn()
    raw: ProviderResponse | None = None
    try:
        if conn.sock is None:
            conn.timeout = config.connection_timeout
            try:
                conn.connect()
            except (ssl.SSLError, CertificateError) as exc:
                raise SSLError(exc) from exc
        sock = conn.sock
        if sock.gettimeout() != config.read_timeout:  # a pooled connection has it already: no ioctl
            sock.settimeout(config.read_timeout)
        try:
            sock.sendall(data)
        except OSError as exc:
            # A provider may answer (413, 401...) and close before reading the whole body:
            # its answer is read all the same, as urllib3 does.
            if not isinstance(exc, BrokenPipeError) and exc.errno not in _PEER_CLOSED:
                raise
        raw = ProviderResponse(sock, method=request.method)
        raw.begin()
        if raw.will_close:
            conn.close()  # the response still reads its own file; the next call connects anew
        return urllib3.HTTPResponse(
            body=raw, headers=header_dict(raw.msg.items()), status=raw.status, version=raw.version,
            version_string="HTTP/1.1" if raw.version == 11 else "HTTP/1.0", reason=raw.reason,
            preload_content=False, decode_content=True, original_response=raw, pool=pool, connection=conn,
            enforce_content_length=True, request_method=request.method, request_url=target,
            sock_shutdown=sock.shutdown)
    except BaseException as exc:
        if raw is not None:
            raw.close()
        conn.close()
        pool._put_conn(None)  # its slot, as urlopen gives it back
        if isinstance(exc, TimeoutError):
            raise ReadTimeoutError(pool, target, "read timed out") from exc
        raise


# Errors of a send to a provider that closed its side: its answer may still be there.
_PEER_CLOSED = frozenset({errno.ECONNRESET, errno.EPROTOTYPE, errno.EPIPE})


def translate_error(exc: BaseException, url: str) -> MLStreamError:
    """A urllib3/socket error as an UpstreamError naming only the host."""
    host = _host(url)
    if isinstance(exc, MLStreamError):  # ours already (the endpoint guard, a prior translation)
        return exc
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: test it first.
    if isinstance(exc, NewConnectionError):
        return UpstreamError(f"could not connect to the provider at {host}: {_cause(exc)}", kind="connection")
    if isinstance(exc, ConnectTimeoutError):
        return UpstreamTimeout(f"timed out connecting to the provider at {host}")
    if isinstance(exc, (ReadTimeoutError, TimeoutError)):
        return UpstreamTimeout(f"the provider at {host} sent nothing within the read timeout")
    if isinstance(exc, SSLError):
        return UpstreamError(f"TLS handshake with the provider at {host} failed", kind="connection")
    if isinstance(exc, (ProtocolError, OSError, http.client.HTTPException)):
        return UpstreamError(f"the connection to the provider at {host} broke: {_cause(exc)}", kind="connection")
    if isinstance(exc, HTTPError):
        return UpstreamError(f"the call to the provider at {host} failed: {type(exc).__name__}", kind="connection")
    return UpstreamError(f"the call to the provider at {host} failed", kind="connection")


def error_from_response(status: int, body: bytes, url: str, secrets: Iterable[str],
                        headers: Any = None) -> UpstreamError:
    """The provider's error answer as our error: its 4xx passed on, else 502."""
    message = redact(provider_message(body), secrets)
    reason = f"Error from remote service ({_host(url)}): status {status}"
    if message:
        reason += f": {message}"
    if status == 529:  # Anthropic's "overloaded": a status no HTTP client knows
        return UpstreamOverloaded(reason, upstream_status=status)
    error = UpstreamError(reason, upstream_status=status)
    if status == 429:
        # Passed on as whole seconds, whatever form the provider used (a date, a
        # fraction, garbage, or a value with line breaks in it): never its raw text.
        seconds = parse_retry_after(headers.get("Retry-After") or "") if headers is not None else None
        error.headers["Retry-After"] = str(max(1, math.ceil(seconds))) if seconds is not None else "1"
    return error


def provider_message(body: bytes) -> str:
    """The human message of an error body (OpenAI, Bedrock or plain text)."""
    text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        for key in ("message", "Message", "error"):
            if isinstance(doc.get(key), str):
                return doc[key]
    return text[:500]


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or "?"


def _cause(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc.__cause__ or exc
    text = str(reason)
    # urllib3 prefixes its own object repr ("<HTTPConnection object at 0x..>: ...").
    return text.split(": ", 1)[-1] if text.startswith("<") else text
