"""Speed-ups over stdlib and urllib3 internals, gathered where they can be seen together.

Each one reaches past a public API for a measured reason on the hot path, and each
is checked by ``tests/unit/test_speedups.py``, which fails loudly (instead of the
server silently slowing down or breaking) if a new Python or urllib3 removes the
internal it relies on.

- ``raw_read1``: http.client's own chunk-aware ``read1`` under a urllib3 response
  (``response._fp``) skips urllib3's decoding layer: a third of the reader's cost
  per relayed chunk. Only for an identity-encoded body; anything else goes through
  urllib3, which decodes it.
- ``escape_json_string``: ``json.encoder.encode_basestring``, json's C string
  escaper, is ``json.dumps(text)`` without its per-call setup; it runs once per
  relayed token.
- ``whole_read``: a non-stream answer with a Content-Length read by http.client's
  ``read`` under a urllib3 response: urllib3's read (its decoder queue, error-catching
  context manager, length bookkeeping) cost hundreds of bytecodes per answer.
- ``chunked_read``: a chunked body read straight off http.client's buffered reader
  (``response._fp.fp``), every chunk that has arrived decoded in one pass
  (``framing.ChunkedBody``). http.client's ``read1`` returns one chunk per call, and
  a provider sends each event as its own chunk: a read, a decode and a hand-over per
  token where one per burst does. At the end of the body http.client's response is
  closed as its own reader closes it, so urllib3 gives the connection back to its pool.
- ``body_ready``: whether a response's body has bytes to read at once, buffered with
  its head by http.client's reader (``response._fp.fp``) or waiting in the kernel (a
  non-blocking ``peek``: the socket's timeout set to 0 for it), or within a short wait
  on the socket. When they are, the thread that opened the provider call reads them
  itself instead of waking a pool worker to do it: two thread wake-ups less on the
  way to the first token.
- ``header_dict``: urllib3's ``HTTPHeaderDict`` of a provider answer's fields with its
  container filled directly (``_container``: lowercased name -> [name, value, ...]), as
  ``HTTPHeaderDict(fields)`` fills it through ``extend`` and ``add``, a Python call per
  field after an ``isinstance`` against ``typing.Mapping`` (an ABC walk): on the way to
  every first token.
- ``start_thread_nowait``: ``_thread.start_new_thread`` starts a bare thread without
  waiting for it to run. ``threading.Thread.start`` waits, and with a thousand
  streams contending for the GIL that wait stalled the accept loop for seconds.
- ``loads_json`` / ``dumps_json``: orjson when it is installed (the ``fast`` extra),
  else the stdlib. An embedding answer of 256 vectors of 1,536 floats is 400k
  numbers: the stdlib takes ~80 ms to decode them and ~90 ms to encode them again,
  orjson ~13 ms and a few ms (bench ``embedding_predict``). What orjson refuses
  (integers past 64 bits, lone surrogates, non-string keys) goes to the stdlib, so
  the answer is the same JSON value either way.
- ``dot_products``: numpy when it is installed (the ``fast`` extra), else a Python loop:
  a semantic cache look-up compares one embedding with up to 1,000 stored ones; 1,000
  of 1,536 float32 take ~75 ms in Python (under the GIL, on a handler thread), well
  about 1 ms in numpy. Without it a look-up compares fewer (``caching.semantic``).
  The single binary leaves numpy out (it would double its size).

Process-wide settings (the thread stack size) are not here: the
command line sets them once at start-up (``cli.tune_process``).
"""

from __future__ import annotations

import _thread
import http.client
import importlib.util
import json
import operator
import os
import select
from array import array
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Callable, Iterable

from urllib3._collections import HTTPHeaderDict

try:
    import orjson
except ImportError:  # the stdlib does the same, slower
    orjson = None

# numpy is imported on the first comparison, not at start: it costs a server that never
# compares vectors 12 MB of RSS, 0.2 s of start-up and a thread pool (kept to one thread).
FAST_DOT_PRODUCTS = importlib.util.find_spec("numpy") is not None
_numpy: Any = None

escape_json_string: Callable[[str], str] = encode_basestring


def loads_json(data: bytes | str) -> Any:
    """``json.loads``, faster for large documents (orjson when installed). ValueError for
    anything that is not JSON, a document nested too deeply for the stack included.

    Numbers: orjson reads an integer past 64 bits as a float (the stdlib keeps it exact),
    so a document that is written on again must not come through here.

    Depth: orjson (3.10 and later) refuses past 1,024 levels with a ValueError; the stdlib
    raises RecursionError, turned into ValueError here. Older orjson had no limit and
    overflowed a 512 KiB thread stack (the process died): hence the version floor.
    """
    if orjson is not None:
        try:
            return orjson.loads(data)
        except ValueError:
            pass  # maybe valid JSON orjson does not take (NaN, a lone surrogate): the stdlib decides
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("the JSON document is nested too deeply") from None


def dumps_json(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes, non-ASCII unescaped (orjson when installed)."""
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass  # orjson.JSONEncodeError: the stdlib writes what orjson will not
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace")


def dot_products(query: bytes, vectors: list[bytes]) -> list[float]:
    """The dot product of ``query`` with each of ``vectors``, all float32 bytes of its length."""
    global _numpy
    if not vectors:
        return []
    if not FAST_DOT_PRODUCTS:
        return python_dot_products(query, vectors)
    if _numpy is None:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one matrix-vector product: no pool for it
        import numpy
        _numpy = numpy
    matrix = _numpy.frombuffer(b"".join(vectors), dtype=_numpy.float32).reshape(len(vectors), -1)
    return (matrix @ _numpy.frombuffer(query, dtype=_numpy.float32)).tolist()


def python_dot_products(query: bytes, vectors: list[bytes]) -> list[float]:
    unit = array("f")
    unit.frombytes(query)
    out = []
    for data in vectors:
        other = array("f")
        other.frombytes(data)
        out.append(sum(map(operator.mul, unit, other)))
    return out


def raw_read1(response: Any) -> Callable[[int], bytes]:
    """The cheapest ``read1`` for what has arrived of a urllib3 response's body."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    raw = getattr(response, "_fp", None)
    if encoding == "identity" and raw is not None and hasattr(raw, "read1"):
        return raw.read1
    return response.read1


def whole_read(response: Any, limit: int) -> bytes | None:
    """A body of at most ``limit`` bytes with a Content-Length and no content coding,
    read whole by http.client's own response under a urllib3 one (``response._fp``),
    which closes its reader at the end as urllib3 would; None for any other body (left
    to urllib3's ``read``, which decodes, and bounds a body of unknown length)."""
    raw = getattr(response, "_fp", None)
    length = getattr(raw, "length", None)
    if length is None or length > limit or getattr(raw, "chunked", True) or not hasattr(raw, "read"):
        return None
    if (response.headers.get("Content-Encoding") or "identity").strip().lower() != "identity":
        return None
    return raw.read()


def chunked_read(response: Any, new_body: Callable[[int | None], Any]) -> Callable[[int], bytes] | None:
    """``read(size)``: the data of every chunk of ``response``'s chunked body that has
    arrived (waiting for one if none has), b"" at its end; None when the body is not
    an identity-coded chunked one read by http.client. Takes over from http.client's
    reader wherever it stopped (its ``chunk_left``, given to ``new_body``: a
    ``framing.ChunkedBody``); nothing may read the body through http.client afterwards."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    inner = getattr(response, "_fp", None)
    reader = getattr(inner, "fp", None)
    if (encoding != "identity" or not getattr(inner, "chunked", False) or reader is None
            or not hasattr(reader, "read1") or not hasattr(inner, "_close_conn")):
        return None
    body = new_body(inner.chunk_left)

    def read(size: int) -> bytes:
        while not body.done:
            data = reader.read1(size)
            if not data:
                raise http.client.IncompleteRead(b"")  # as http.client's read1 says it
            payload = body.feed(data)
            if body.done:
                inner._close_conn()  # http.client's own end of a body: the socket stays the pool's
            if payload:
                return payload
        return b""

    return read


def body_ready(response: Any, wait: float = 0.0) -> bool:
    """True if the next read of ``response``'s body returns without waiting, after at
    most ``wait`` seconds for bytes to arrive (False at once at its end, or when shut
    down)."""
    inner = getattr(response, "_fp", None)  # http.client's response
    reader = getattr(inner, "fp", None)     # its BufferedReader
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if reader is None or sock is None or not hasattr(reader, "peek"):
        return False
    if _read_ready_now(inner, reader, sock):
        return True
    try:
        readable, _, _ = select.select([sock], [], [], wait) if wait > 0 else ([], [], [])
    except (OSError, ValueError):
        return False
    return bool(readable) and _read_ready_now(inner, reader, sock)


def _read_ready_now(inner: Any, reader: Any, sock: Any) -> bool:
    """``_read_ready`` with the socket non-blocking for its peeks: one timeout change
    each way (each a system call), not one per peek."""
    try:
        timeout = sock.gettimeout()
        sock.settimeout(0.0)  # the raw read returns None instead of waiting
    except (OSError, ValueError):
        return False
    try:
        return _read_ready(inner, reader)
    finally:
        try:
            sock.settimeout(timeout)
        except (OSError, ValueError):
            pass  # closed meanwhile: the next read says so


def _read_ready(inner: Any, reader: Any) -> bool:
    """Whether http.client's next ``read1`` returns without waiting on the socket.

    Any byte will do, except between the chunks of a chunked body: there the read
    takes the last chunk's CRLF and the next size line whole, and blocks for what of
    them has not come (a role-only first chunk leaves exactly its CRLF behind). That
    CRLF, when buffered, is taken here as http.client would take it, so that the
    buffer refills with what followed it.
    """
    if not getattr(inner, "chunked", False) or inner.chunk_left:  # not chunked, or inside a chunk
        return bool(_peek(reader))
    if inner.chunk_left == 0:  # a chunk's data read, its CRLF not yet
        if len(_peek(reader)) < 2:
            return False
        inner._safe_read(2)  # buffered: no wait
        inner.chunk_left = None
    buffered = _peek(reader)
    line_end = buffered.find(b"\n")
    if line_end < 0:
        return False
    try:
        size = int(buffered[:line_end].split(b";", 1)[0].strip(), 16)
    except ValueError:
        return True  # the read fails at once: no wait either
    rest = buffered[line_end + 1:]
    if size:
        return bool(rest)
    # the last chunk: its trailer section (usually empty) must be complete too
    return rest.startswith((b"\r\n", b"\n")) or b"\n\r\n" in rest or b"\n\n" in rest


def _peek(reader: Any) -> bytes:
    """What is buffered, or else what one read of the (non-blocking) socket brings."""
    try:
        return reader.peek(1) or b""
    except (OSError, ValueError):
        return b""


def header_dict(fields: Iterable[tuple[str, str]]) -> HTTPHeaderDict:
    """``HTTPHeaderDict(fields)``: every (name, value) kept in order, a repeated name's
    values under its first spelling."""
    headers = HTTPHeaderDict()
    container = headers._container
    for name, value in fields:
        entry = [name, value]
        kept = container.setdefault(name.lower(), entry)
        if kept is not entry:
            kept.append(value)
    return headers


def start_thread_nowait(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    """Run ``function(*args)`` in a new daemon thread (never joined) without waiting for it."""
    _thread.start_new_thread(function, args)
