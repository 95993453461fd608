"""read_stream driven by a real ProviderCall over a stub client, a stub response and a
real decoder. No sockets.

The stub client stands in for the network side of ``UpstreamClient`` (send, read a
whole body); the stub response stands in for a urllib3 response: ``read1`` hands out scripted chunks
(bytes, an exception to raise, or BLOCK: wait until ``shutdown()`` is called,
as a real read on a socket that is shut down returns), and every connection
call is recorded so a test can tell a drained (reused) connection from a
closed one.
"""

from __future__ import annotations

import http.client
import io
import json
import threading

import pytest
from urllib3.exceptions import ProtocolError as Urllib3ProtocolError
from urllib3.exceptions import ReadTimeoutError

from mlstream.models.connectors import UpstreamRequest, parse_connector
from mlstream.errors import MLStreamError, ProtocolError, UpstreamError, UpstreamTimeout
from mlstream.providers.openai import OpenAIStreamDecoder
from mlstream.wire.sse import SSEDecoder
from mlstream.streaming.channel import Channel
from mlstream.providers.events import Delta, Done, Failure, Started
from mlstream.streaming.pool import StreamPool
from mlstream.streaming.reader import read_stream, start_stream
from mlstream.streaming.watcher import Watcher
from mlstream.upstream.client import ProviderCall

from ..support.responses import BLOCK, StubResponse
from ..support.threads import run_in_thread
from ..support.timeouts import HANG_GUARD

URL = "https://api.example.com/v1/chat/completions?api_key=sk-secret"
# The readiness loop the streams of start_stream wait on (one for the module: a thread).
WATCHER = Watcher()


@pytest.fixture(scope="module", autouse=True)
def _close_watcher():
    yield
    WATCHER.close()


def openai_chunk(content: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def drain(channel: Channel) -> list:
    items = []
    while (item := channel.get_nowait()) is not None:
        items.append(item)
    return items


CONNECTOR = parse_connector({
    "name": "chat", "protocol": "http", "credential": {"openAI_key": "sk-secret"},
    "actions": [{"action_type": "predict", "method": "POST", "url": URL,
                 "headers": {"Authorization": "Bearer ${credential.openAI_key}"}, "request_body": "{}"}]})


class StubClient:
    """The network side of UpstreamClient: ``send`` calls the test's function,
    ``read_body`` (an error answer's body) returns ``error_body`` or raises it."""

    def __init__(self, send, error_body=b'{"error": {"message": "provider said no"}}') -> None:
        self._send = send
        self._error_body = error_body

    def send(self, request, config, *, allow_private=False, tls=None):
        return self._send()

    def read_body(self, response, url):
        if isinstance(self._error_body, BaseException):
            raise self._error_body
        return self._error_body


def call_of(send, **client_options) -> ProviderCall:
    return ProviderCall(StubClient(send, **client_options), UpstreamRequest("POST", URL, {}, b"{}"), CONNECTOR,
                        allow_private=False)


def run(response, *, capacity: int = 64, decoder=None, error_body=None, stall_timeout: float = HANG_GUARD,
        channel: Channel | None = None):
    """Run read_stream to its end in this thread; returns (channel, items put on it)."""
    channel = channel or Channel(capacity)

    def send():
        if isinstance(response, BaseException):
            raise response
        return response

    options = {} if error_body is None else {"error_body": error_body}
    read_stream(channel, call_of(send, **options), decoder or OpenAIStreamDecoder(chat=True), stall_timeout)
    return channel, drain(channel)


# --- the normal path ------------------------------------------------------------------


def test_a_whole_stream_is_started_deltas_done_and_the_connection_is_reused():
    response = StubResponse([openai_chunk("Hel"), openai_chunk("lo") + DONE])
    channel, items = run(response)
    assert items == [Started(200), Delta("Hel"), Delta("lo"), Done(None, None)]
    assert response.calls == ["drain_conn", "release_conn"]  # the rest of the body read, back to the pool
    assert not channel.cancelled


def test_the_reader_lets_go_of_the_response_when_it_ends():
    response = StubResponse([openai_chunk("x") + DONE])
    channel, _ = run(response)
    channel.cancel()  # a late cancel must not touch a response the pool may already reuse
    assert "shutdown" not in response.calls


def test_done_split_across_reads_still_completes():
    stream = openai_chunk("a") + openai_chunk("b") + DONE
    response = StubResponse([stream[i:i + 7] for i in range(0, len(stream), 7)])
    _, items = run(response)
    assert items == [Started(200), Delta("a"), Delta("b"), Done(None, None)]
    assert response.calls == ["drain_conn", "release_conn"]


def test_a_stream_that_ends_before_done_is_a_failure_and_the_connection_closed():
    response = StubResponse([openai_chunk("partial")])  # then b"": end of body
    _, items = run(response)
    assert items[:2] == [Started(200), Delta("partial")]
    assert len(items) == 3 and isinstance(items[2], Failure)
    assert "before [DONE]" in items[2].error.reason
    assert response.calls == ["close", "release_conn"]


def test_a_compressed_body_is_read_through_urllib3_and_a_plain_one_past_it():
    class Raw:
        def __init__(self, chunks):
            self.chunks = list(chunks)

        def read1(self, amount):
            return self.chunks.pop(0) if self.chunks else b""

    plain = StubResponse([b"never read"])
    plain._fp = Raw([openai_chunk("raw") + DONE])
    assert run(plain)[1] == [Started(200), Delta("raw"), Done(None, None)]
    assert plain.reads == 0

    gzipped = StubResponse([openai_chunk("decoded") + DONE], headers={"Content-Encoding": "gzip"})
    gzipped._fp = Raw([b"\x1f\x8b compressed bytes"])
    assert run(gzipped)[1] == [Started(200), Delta("decoded"), Done(None, None)]


# --- refusals before the stream -------------------------------------------------------


@pytest.mark.parametrize("status", [300, 400, 401, 429, 500, 503])
def test_a_non_2xx_answer_is_one_failure_with_the_providers_error(status):
    response = StubResponse([b"never read"], status=status)
    _, items = run(response, error_body=b'{"error": {"message": "provider said no to sk-secret"}}')
    assert len(items) == 1 and isinstance(items[0], Failure)
    error = items[0].error
    assert isinstance(error, UpstreamError) and error.upstream_status == status
    assert error.http_status == (status if 400 <= status < 500 else 502)
    assert "provider said no" in error.reason and "sk-secret" not in error.reason  # redacted
    assert response.reads == 0  # the stream itself was never read
    assert response.calls == ["close", "release_conn"]


def test_send_raising_is_one_failure_with_that_error():
    error = UpstreamTimeout("timed out connecting to the provider at api.example.com")
    _, items = run(error)
    assert items == [Failure(error)]


def test_a_channel_cancelled_while_queued_never_sends():
    channel = Channel(4)
    channel.cancel()
    sent = []
    read_stream(channel, call_of(lambda: sent.append(1)), OpenAIStreamDecoder(chat=True), 1.0)
    assert sent == []


def test_a_cancel_during_send_shuts_the_new_response_down():
    channel = Channel(4)
    response = StubResponse([openai_chunk("x") + DONE])

    def send():
        channel.cancel(MLStreamError("client gone"))  # the client leaves while headers are awaited
        return response

    read_stream(channel, call_of(send), OpenAIStreamDecoder(chat=True), 1.0)
    assert response.reads == 0
    assert response.calls == ["shutdown", "close", "release_conn"]


# --- cancel, stall ----------------------------------------------------------------------


def test_cancel_during_a_blocked_read_returns_promptly_and_closes_the_connection():
    response = StubResponse([openai_chunk("before"), BLOCK, openai_chunk("after") + DONE])
    channel = Channel(8)
    thread, result, finished = run_in_thread(run, response, channel=channel)
    assert response.reading.wait(HANG_GUARD)
    assert not finished.is_set()
    channel.cancel(MLStreamError("client gone"))
    assert finished.wait(HANG_GUARD), "the reader stayed blocked after cancel"
    thread.join(HANG_GUARD)
    assert response.calls == ["shutdown", "close", "release_conn"]  # never drained for reuse


def test_cancel_during_a_read_that_raises_returns_quietly():
    class Broken(StubResponse):
        def read1(self, amount):
            if self.reads:
                raise Urllib3ProtocolError("Connection broken: shut down")
            return super().read1(amount)

    response = Broken([BLOCK])
    channel = Channel(8)
    thread, result, finished = run_in_thread(run, response, channel=channel)
    assert response.reading.wait(HANG_GUARD)
    error = MLStreamError("client gone")
    channel.cancel(error)
    assert finished.wait(HANG_GUARD)
    thread.join(HANG_GUARD)
    assert channel.get(0) == Failure(error)  # the caller's error, not a translated upstream one
    assert response.calls == ["shutdown", "close", "release_conn"]


def test_a_client_that_stops_reading_stalls_the_stream_and_cancels_it():
    chunks = [openai_chunk(str(n)) for n in range(10)] + [DONE]
    response = StubResponse(chunks)
    channel = Channel(2)
    thread, _, finished = run_in_thread(run, response, channel=channel, stall_timeout=0.05)
    assert finished.wait(HANG_GUARD), "the reader did not give up on a stalled client"
    thread.join(HANG_GUARD)
    assert channel.cancelled
    assert response.calls == ["shutdown", "close", "release_conn"]  # the cancel shut it down
    assert response.reads < len(chunks)  # stopped reading the upstream


# --- broken streams -------------------------------------------------------------------


def test_a_malformed_stream_is_an_upstream_failure():
    # The real SSE decoder refuses a line longer than its limit.
    response = StubResponse([openai_chunk("ok"), b"data: " + b"x" * (SSEDecoder.MAX_LINE_BYTES + 1)])
    _, items = run(response)
    assert items[:2] == [Started(200), Delta("ok")]
    assert len(items) == 3 and isinstance(items[2], Failure)
    assert isinstance(items[2].error, UpstreamError) and items[2].error.http_status == 502
    assert "malformed" in items[2].error.reason
    assert response.calls == ["close", "release_conn"]


class ScriptedDecoder:
    """A decoder stub: each feed returns the next scripted list, or raises it."""

    def __init__(self, *script):
        self.script = list(script)

    def feed(self, data):
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def finish(self):
        return [Failure(UpstreamError("ended early"))]


def test_a_decoder_protocol_error_is_a_failure_naming_the_reason():
    decoder = ScriptedDecoder([Delta("a")], ProtocolError("bad frame checksum"))
    response = StubResponse([b"1", b"2"])
    _, items = run(response, decoder=decoder)
    assert items[:2] == [Started(200), Delta("a")]
    assert isinstance(items[2], Failure) and "bad frame checksum" in items[2].error.reason
    assert response.calls == ["close", "release_conn"]


@pytest.mark.parametrize("exc, kind, status", [
    (Urllib3ProtocolError("Connection broken: IncompleteRead(3 bytes read)"), UpstreamError, 502),
    (ConnectionResetError(104, "Connection reset by peer"), UpstreamError, 502),
    (ReadTimeoutError(None, URL, "Read timed out."), UpstreamTimeout, 504),
], ids=["protocol", "reset", "read-timeout"])
def test_an_upstream_error_mid_stream_is_translated(exc, kind, status):
    response = StubResponse([openai_chunk("partial"), exc])
    _, items = run(response)
    assert items[:2] == [Started(200), Delta("partial")]
    assert len(items) == 3 and isinstance(items[2], Failure)
    error = items[2].error
    assert type(error) is kind and error.http_status == status
    assert "api.example.com" in error.reason and "sk-secret" not in error.reason  # host only
    assert response.calls == ["close", "release_conn"]


def test_an_error_body_that_cannot_be_read_still_ends_the_stream():
    response = StubResponse(status=500)
    _, items = run(response, error_body=OSError("the error body could not be read"))
    assert len(items) == 1 and isinstance(items[0], Failure)
    assert isinstance(items[0].error, UpstreamError)
    assert response.calls == ["close", "release_conn"]


def test_a_failure_on_a_full_channel_is_never_silently_dropped():
    # Capacity 2: Started and one Delta fill it; the next feed breaks the stream while the
    # client is not reading. Either the Failure must get through or the channel be cancelled
    # (the writer then gets a Failure); anything else leaves the writer heartbeating forever.
    decoder = ScriptedDecoder([Delta("a")], ProtocolError("bad frame"))
    response = StubResponse([b"1", b"2"])
    channel = Channel(2)
    read_stream(channel, call_of(lambda: response), decoder, 0.05)
    items = [channel.get(0) for _ in range(3)]
    assert channel.cancelled or isinstance(items[-1], Failure), f"items {items}: no terminal item"


# --- start_stream: opened on the caller's thread when a worker is free -------------------


def recording_send(threads: list[str]):
    """A send that records the thread it runs on and answers one token and [DONE]."""
    def send():
        threads.append(threading.current_thread().name)
        return StubResponse([openai_chunk("hi") + DONE])
    return send


def test_with_a_worker_free_the_call_is_opened_on_the_callers_thread_and_the_body_read_on_a_worker():
    pool = StreamPool(1, 1)
    channel = Channel(8)
    threads: list[str] = []
    send = recording_send(threads)
    start_stream(pool, WATCHER, channel, call_of(send), OpenAIStreamDecoder(chat=True), HANG_GUARD)
    assert threads == [threading.current_thread().name]
    assert [channel.get(HANG_GUARD) for _ in range(3)] == [Started(200), Delta("hi"), Done(None, None)]
    assert pool.wait_idle(HANG_GUARD)
    pool.shutdown()


def test_with_every_worker_busy_the_call_is_still_opened_on_the_callers_thread():
    pool = StreamPool(1, 1)
    gate = threading.Event()
    pool.run(lambda: gate.wait(HANG_GUARD))       # the one worker is busy
    channel = Channel(8)
    threads: list[str] = []
    send = recording_send(threads)
    start_stream(pool, WATCHER, channel, call_of(send), OpenAIStreamDecoder(chat=True), HANG_GUARD)
    assert threads == [threading.current_thread().name]  # no wait for a worker to send
    assert channel.get(HANG_GUARD) == Started(200)
    gate.set()  # the body is read by the worker, once it is free
    assert [channel.get(HANG_GUARD) for _ in range(2)] == [Delta("hi"), Done(None, None)]
    assert pool.wait_idle(HANG_GUARD)
    pool.shutdown()


def test_a_refused_call_opened_on_the_callers_thread_ends_its_stream_in_the_pool():
    pool = StreamPool(1, 0)
    channel = Channel(8)
    start_stream(pool, WATCHER, channel, call_of(lambda: StubResponse(status=500)), OpenAIStreamDecoder(chat=True),
                 HANG_GUARD)
    item = channel.get(HANG_GUARD)
    assert isinstance(item, Failure) and item.error.http_status == 502
    assert pool.wait_idle(HANG_GUARD)
    pool.shutdown()


_PAIRS: list = []


@pytest.fixture(autouse=True)
def _close_socket_pairs():
    """Close every socket pair a test opened, also when it failed: a worker blocked on
    the provider's side would otherwise keep the test process alive."""
    yield
    while _PAIRS:
        _PAIRS.pop().close()


def response_over_a_socket_pair(first: bytes):
    """A real urllib3 response read from a socket pair, ``first`` sent already (the head
    and maybe more); returns (response, our socket, the provider's socket)."""
    import http.client
    import socket

    import urllib3

    ours, theirs = socket.socketpair()
    _PAIRS.extend((theirs, ours))
    theirs.sendall(first)
    inner = http.client.HTTPResponse(ours)
    inner.begin()

    class Response(urllib3.HTTPResponse):
        def shutdown(self):  # what channel.cancel calls; a socket pair needs no more
            pass

    response = Response(body=inner, headers=dict(inner.getheaders()), status=200, preload_content=False,
                        original_response=inner)
    response._connection = type("Connection", (), {"sock": ours})()
    return response, ours, theirs


def chunk_of(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


class RecordingDecoder(OpenAIStreamDecoder):
    """The real decoder, noting the thread of each feed (who read the provider's bytes)."""

    def __init__(self) -> None:
        super().__init__(chat=True)
        self.fed_on: list[str] = []

    def feed(self, data):
        self.fed_on.append(threading.current_thread().name)
        return super().feed(data)


def finish_and_check(pool, channel, ours, theirs) -> None:
    """The rest, read by the worker the stream was handed to."""
    theirs.sendall(chunk_of(DONE) + b"0\r\n\r\n")
    assert channel.get(HANG_GUARD) == Done(None, None)
    assert pool.wait_idle(HANG_GUARD)
    pool.shutdown()
    ours.close()
    theirs.close()


def test_what_arrived_with_the_head_is_read_on_the_callers_thread():
    """The first events came with the head, so the caller (the writer's thread) puts
    them itself; the rest is read on a worker."""
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(openai_chunk("first")))
    pool = StreamPool(1, 0)
    channel = Channel(8)
    decoder = RecordingDecoder()
    start_stream(pool, WATCHER, channel, call_of(lambda: response), decoder, HANG_GUARD)
    assert decoder.fed_on == [threading.current_thread().name]
    assert channel.get_nowait() == Started(200)      # already there: put by this thread
    assert channel.get_nowait() == Delta("first")
    finish_and_check(pool, channel, ours, theirs)


class SendAfterALook:
    """The connection's socket as body_ready sees it: the provider sends ``data`` only
    once the ``look``-th non-blocking look at the socket is over (each look sets the
    timeout twice: 0, then restored). Sent after the only look that could find it
    (``look=1`` with the head alone), it can only be met by the wait that follows."""

    def __init__(self, ours, theirs, data: bytes, look: int) -> None:
        self._ours = ours
        self._sender = threading.Thread(target=lambda: theirs.sendall(data), daemon=True)
        self._trigger = 2 * look
        self.settings = 0

    def fileno(self) -> int:
        return self._ours.fileno()

    def gettimeout(self):
        return self._ours.gettimeout()

    def settimeout(self, value) -> None:
        self._ours.settimeout(value)
        self.settings += 1
        if self.settings == self._trigger:
            self._sender.start()


def test_first_bytes_that_follow_the_head_soon_are_read_on_the_callers_thread(monkeypatch):
    from mlstream.streaming import reader

    monkeypatch.setattr(reader, "FIRST_BYTES_WAIT_SECONDS", HANG_GUARD)  # "soon": whenever they come
    response, ours, theirs = response_over_a_socket_pair(HEAD)  # the head alone
    sock = SendAfterALook(ours, theirs, chunk_of(openai_chunk("first")), look=1)
    response._connection = type("Connection", (), {"sock": sock})()
    pool = StreamPool(1, 0)
    channel = Channel(8)
    decoder = RecordingDecoder()
    start_stream(pool, WATCHER, channel, call_of(lambda: response), decoder, HANG_GUARD)
    assert decoder.fed_on == [threading.current_thread().name]  # waited for and read by this thread
    assert channel.get_nowait() == Started(200)
    assert channel.get_nowait() == Delta("first")
    finish_and_check(pool, channel, ours, theirs)


ROLE_ONLY = (b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, '
             b'"finish_reason": null}]}\n\n')


def test_a_first_read_with_no_item_is_followed_by_more_reads_on_the_callers_thread(monkeypatch):
    """OpenAI's first chunk (a role, no content) gives no item: the caller reads on until
    the first token, which came in a later packet, instead of waking a worker for it."""
    from mlstream.streaming import reader

    monkeypatch.setattr(reader, "FIRST_BYTES_WAIT_SECONDS", HANG_GUARD)
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(ROLE_ONLY))
    # look 1 finds the role chunk; look 2 its CRLF, and the token is sent after it
    sock = SendAfterALook(ours, theirs, chunk_of(openai_chunk("first")), look=2)
    response._connection = type("Connection", (), {"sock": sock})()
    pool = StreamPool(1, 0)
    channel = Channel(8)
    decoder = RecordingDecoder()
    start_stream(pool, WATCHER, channel, call_of(lambda: response), decoder, HANG_GUARD)
    assert decoder.fed_on == [threading.current_thread().name] * 2
    assert channel.get_nowait() == Started(200)
    assert channel.get_nowait() == Delta("first")
    finish_and_check(pool, channel, ours, theirs)


def test_with_no_first_item_by_the_deadline_the_reading_is_handed_to_a_worker(monkeypatch):
    from mlstream.streaming import reader

    monkeypatch.setattr(reader, "FIRST_BYTES_WAIT_SECONDS", 0.01)
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(ROLE_ONLY))
    pool = StreamPool(1, 0)
    channel = Channel(8)
    decoder = RecordingDecoder()
    start_stream(pool, WATCHER, channel, call_of(lambda: response), decoder, HANG_GUARD)
    assert decoder.fed_on == [threading.current_thread().name]  # the role chunk, then the wait ran out
    assert channel.get_nowait() == Started(200)
    theirs.sendall(chunk_of(openai_chunk("first")))
    assert channel.get(HANG_GUARD) == Delta("first")
    assert decoder.fed_on[-1].startswith("mlstream-reader")
    finish_and_check(pool, channel, ours, theirs)


def test_a_burst_larger_than_the_channel_read_on_the_callers_thread_never_waits_for_room():
    """The writer's own thread must not wait for room in its own channel: what does not
    fit is put by the worker, in order, as the writer makes room."""
    burst = b"".join(openai_chunk(f"t{i}") for i in range(5))
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(burst))  # one HTTP chunk, 5 events
    pool = StreamPool(1, 0)
    channel = Channel(2)  # Started and one token fit
    start_stream(pool, WATCHER, channel, call_of(lambda: response), OpenAIStreamDecoder(chat=True), HANG_GUARD)
    got = [channel.get(HANG_GUARD) for _ in range(6)]
    assert got == [Started(200)] + [Delta(f"t{i}") for i in range(5)]
    assert not channel.cancelled
    finish_and_check(pool, channel, ours, theirs)


def test_a_failure_read_on_the_callers_thread_with_no_room_is_put_by_the_worker():
    response, ours, theirs = response_over_a_socket_pair(HEAD + b"zz\r\n")  # a broken chunk size
    pool = StreamPool(1, 0)
    channel = Channel(1)  # Started fills it
    start_stream(pool, WATCHER, channel, call_of(lambda: response), OpenAIStreamDecoder(chat=True), HANG_GUARD)
    assert channel.get(HANG_GUARD) == Started(200)
    item = channel.get(HANG_GUARD)
    assert isinstance(item, Failure) and isinstance(item.error, UpstreamError)
    assert pool.wait_idle(HANG_GUARD)
    pool.shutdown()
    ours.close()
    theirs.close()


def reader_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("mlstream-reader")]


def new_reader_threads(before: list[threading.Thread]) -> list[threading.Thread]:
    """Reader threads started since ``before`` (other tests' idle ones may stop meanwhile)."""
    return [thread for thread in reader_threads() if thread not in before]


def test_the_worker_starts_only_when_the_writer_has_taken_what_was_read_for_it():
    """Read on the writer's thread, the first token goes out with no other thread
    awake: the worker that reads on is started by the writer's first wait."""
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(openai_chunk("first")))
    pool = StreamPool(1, 0)
    channel = Channel(8)
    decoder = RecordingDecoder()
    before = reader_threads()                               # other tests' idle pools
    start_stream(pool, WATCHER, channel, call_of(lambda: response), decoder, HANG_GUARD)
    assert new_reader_threads(before) == [] and pool.active == 1  # leased, not handed over
    assert channel.get(HANG_GUARD) == Started(200)
    assert channel.get(HANG_GUARD) == Delta("first")
    assert new_reader_threads(before) == []
    theirs.sendall(chunk_of(openai_chunk("second")))
    assert channel.get(HANG_GUARD) == Delta("second")       # this wait handed the body over
    assert decoder.fed_on[-1].startswith("mlstream-reader")
    finish_and_check(pool, channel, ours, theirs)


def test_a_stream_cancelled_before_the_writer_waited_is_closed_by_the_worker():
    response, ours, theirs = response_over_a_socket_pair(HEAD + chunk_of(openai_chunk("first")))
    released: list[str] = []
    call = call_of(lambda: response)
    finish = call.finish

    def recording_finish(resp, *, reusable):
        released.append("reused" if reusable else "closed")
        finish(resp, reusable=reusable)

    call.finish = recording_finish  # type: ignore[method-assign]
    pool = StreamPool(1, 0)
    channel = Channel(8)
    start_stream(pool, WATCHER, channel, call, OpenAIStreamDecoder(chat=True), HANG_GUARD)
    assert pool.active == 1 and released == []
    channel.cancel()                                         # the client left before a wait
    assert pool.wait_idle(HANG_GUARD)                        # the lease ended
    assert released == ["closed"]
    pool.shutdown()


# --- a chunked body read by the worker's every-chunk reader ------------------------------


class _Trickle(io.RawIOBase):
    """A socket file whose reads return the scripted pieces one by one (as packets come)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = list(pieces)

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if not self._pieces:
            return 0
        piece = self._pieces.pop(0)
        buffer[:len(piece)] = piece
        return len(piece)

    def readable(self) -> bool:
        return True


class _TrickleSocket:
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Trickle(self._pieces))


class ChunkedResponse:
    """A urllib3-like response over http.client's own, reading scripted packets; records
    whether the drain found the body already ended (it then reads nothing)."""

    def __init__(self, packets: list[bytes]) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        self._fp = http.client.HTTPResponse(_TrickleSocket([head, *packets]))  # type: ignore[arg-type]
        self._fp.begin()
        self.status, self.headers = 200, {}
        self.calls: list[str] = []
        self.drained = b""

    def read1(self, amount: int) -> bytes:
        return self._fp.read1(amount)

    def drain_conn(self) -> None:
        self.calls.append("drain_conn")
        try:
            self.drained = self._fp.read()
        except http.client.HTTPException as exc:  # urllib3's drain_conn swallows it
            self.calls.append(f"drain failed: {exc!r}")

    def release_conn(self) -> None:
        self.calls.append("release_conn")

    def close(self) -> None:
        self.calls.append("close")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


@pytest.mark.parametrize("split", ["terminator in a later packet", "terminator with [DONE]"])
def test_the_last_chunk_after_done_is_read_by_the_reader_that_took_over(split: str) -> None:
    events = [_chunk(openai_chunk("a")), _chunk(openai_chunk("b")), _chunk(DONE)]
    packets = [events[0], events[1] + events[2], b"0\r\n\r\n"] if split.startswith("terminator in") else \
        [events[0], events[1] + events[2] + b"0\r\n\r\n"]
    role = _chunk(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    response = ChunkedResponse([role, *packets])
    # the opening chunk read through http.client, as the writer's thread reads the start
    # of a stream: the worker's reader takes over where its chunk framing stands
    assert response.read1(65536).startswith(b"data: ")
    _, items = run(response)
    assert items == [Started(200), Delta("a"), Delta("b"), Done(None, None)]
    # the body was read to its end by the every-chunk reader: http.client's drain reads nothing
    assert response.calls == ["drain_conn", "release_conn"] and response.drained == b""
    assert response._fp.fp is None
