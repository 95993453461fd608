"""The streaming core under pressure: slow, vanished and stalled clients, slow and
failing providers, overload, many streams, shutdown, rate limits.

Every wait is on a signal (a socket, the fake's counters, the pool's idle
condition) with a generous hang guard; the two fixed windows below are the
measurement itself ("while the client reads nothing for this long ...").
"""

from __future__ import annotations

import json
import resource
import selectors
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from mlstream.server import sse_writer
from mlstream.server.sse_writer import MAX_BATCH_EVENTS
from mlstream.streaming.reader import READ_SIZE
from mlstream.testing.fake_openai import Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import LOOPBACK_TRUST, MLSTREAM
from ..support.streams import held_in_channel, open_stream, post_stream, stream_body, stream_channel
from ..support.timeouts import HANG_GUARD, poll_until
from ..support.wire import raw_request, read_response

# How long a client reads nothing in the backpressure test: the provider has to be
# stuck for this long, not merely slowed.
IDLE_WINDOW = 1.5


def dataasmap(event: dict) -> dict:
    return event["inference_results"][0]["output"][0]["dataAsMap"]


# 1. slow consumer -> backpressure ------------------------------------------------------------
#
# What mlstream holds of a stream is bounded by what it controls, not by the kernel:
#
#   fake --[fake send buf | mlstream recv buf]--> reader --channel--> writer --[send buf | client recv buf]--> client
#                                                 ^ one read            ^ capacity    ^ one batch
#
# The socket buffers are the kernel's and can be tens of MB on a big host (a check
# against them passes even with a channel 1000x too large), so the test measures
# them (/proc/net/tcp) and subtracts them, and looks at the channel itself.

def tcp_queues() -> dict[tuple[int, int], tuple[int, int]]:
    """(local port, remote port) -> (bytes in the send queue, bytes in the receive queue),
    for every IPv4 TCP socket of this network namespace (so both ends of a loopback
    connection)."""
    queues = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, (tx, rx) = fields[1], fields[2], fields[4].split(":")
        queues[(int(local.split(":")[1], 16), int(remote.split(":")[1], 16))] = (int(tx, 16), int(rx, 16))
    return queues


def kernel_bytes(queues: dict, port_a: int, port_b: int) -> int:
    """Bytes of one loopback connection sitting in the kernel, in either direction's buffers."""
    return sum(tx + rx for tx, rx in (queues[(port_a, port_b)], queues[(port_b, port_a)]))


def test_a_client_reading_nothing_stalls_the_provider(make_server, fake):
    queue_chunks = 8
    server = make_server(stream_queue_chunks=queue_chunks)
    client = Client(server.url)
    scenario = Scenario(chunks=40_000, chunk_bytes=1000)  # a 40 MB answer
    model_id = client.model_for(openai_connector(fake, model=scenario.to_model()))
    sock = post_stream(server.url, model_id, rcvbuf=64 * 1024)
    with sock, sock.makefile("rb") as reader:
        assert fake.stats.wait_for(lambda s: s.streams_started == 1, HANG_GUARD)
        channel = stream_channel(server)
        # The client reads nothing: the writer blocks, the reader fills the channel ...
        assert poll_until(lambda: held_in_channel(channel) >= queue_chunks, HANG_GUARD)
        # ... and then stops reading the provider, which never gets to the end.
        finished = fake.stats.wait_for(lambda s: s.chunks_written == scenario.chunks, IDLE_WINDOW)
        assert not finished
        # Bound 1: the channel holds at most its configured capacity, however long we wait.
        assert held_in_channel(channel) == queue_chunks
        # Bound 2, black-box: what mlstream has read from the provider but not yet given to
        # the client's connection is the channel plus one upstream read and one write batch.
        # A stalled pipeline does not move, so the counters and the kernel queues are read
        # until two readings agree.
        readings = []
        # only this test's connections: other sockets on a shared machine never stand still
        ours = {fake.port, tuple_of(server.url)[1]}

        def stalled() -> bool:
            queues = {ports: sizes for ports, sizes in tcp_queues().items() if ours & set(ports)}
            readings.append((fake.stats.chunks_written, fake.stats.bytes_written, queues))
            return len(readings) >= 2 and readings[-1] == readings[-2]
        assert poll_until(stalled, HANG_GUARD, interval=0.05)
        chunks_written, bytes_written, queues = readings[-1]
        [upstream_port] = [remote for local, remote in queues if local == fake.port and remote]
        upstream_kernel = kernel_bytes(queues, fake.port, upstream_port)
        downstream_kernel = kernel_bytes(queues, sock.getsockname()[1], tuple_of(server.url)[1])
        # The client resumes and the answer arrives whole.
        response = read_response(reader)
    maps = [dataasmap(e) for e in response.events()]
    assert len(maps) == scenario.chunks + 1 and maps[-1]["is_last"]
    assert [m["content"] for m in maps[:3]] == fake_tokens(scenario)[:3]
    # In tokens: every content frame from the fake, and every content chunk to the
    # client, has one size (chunk_bytes of ASCII); headers make up less than one.
    frame_in = bytes_written / chunks_written
    frame_out = len(sse_writer.chunk(response.chunks[0]))
    taken = chunks_written + 1 - upstream_kernel // frame_in  # +1: a sendall under way
    passed_on = downstream_kernel // frame_out
    # Besides the channel: the items decoded from one upstream read (plus http.client's
    # 8 KiB buffer; every frame carries at least chunk_bytes) waiting for a credit, one
    # batch of events in the writer's hands, and a token of rounding either side.
    slack = (READ_SIZE + 8 * 1024) // 1000 + MAX_BATCH_EVENTS + 2
    assert taken - passed_on <= queue_chunks + slack, (taken, passed_on, upstream_kernel, downstream_kernel)


# 2. client goes away (see also test_predict_stream) --------------------------------------------

def test_a_reset_client_releases_the_worker_and_the_upstream(make_server, fake):
    server = make_server(stream_workers=2)
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=1000, delay_ms=50).to_model()))
    sock = post_stream(server.url, model_id)
    assert sock.recv(1)  # the response has started
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # RST, not FIN
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
    assert server.app.pool.wait_idle(HANG_GUARD)
    assert fake.stats.wait_for(lambda s: s.connections_open == 0, HANG_GUARD)


def test_a_client_hanging_up_on_a_silent_provider_is_noticed_at_once(make_server, fake):
    # The provider pauses 60 s between chunks and heartbeats are 120 s apart: nothing
    # would be written to the client for a minute, so only the hang-up watcher can
    # notice that it left.
    server = make_server(heartbeat_interval=120.0)
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=3, delay_ms=60_000).to_model()))
    sock, reader = open_stream(server, model_id)
    reader.close()
    sock.close()
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
    assert server.app.pool.wait_idle(HANG_GUARD)
    assert server.app.in_flight.wait_idle(HANG_GUARD)


# 3. client stalls -> cut after the stall timeout ---------------------------------------------

def test_a_stalled_client_is_cut_after_the_stall_timeout(make_server, fake):
    server = make_server(client_stall_timeout=1.0, stream_queue_chunks=8)
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=40_000, chunk_bytes=1000).to_model()))
    sock = post_stream(server.url, model_id, rcvbuf=64 * 1024)
    with sock:
        started = time.monotonic()
        assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
        assert server.app.pool.wait_idle(HANG_GUARD)
        assert time.monotonic() - started >= 1.0
        # mlstream closed the connection: reading what is buffered ends in EOF, not a wait.
        sock.settimeout(HANG_GUARD)
        while sock.recv(1 << 20):
            pass
    assert fake.stats.streams_completed == 0


# 4. provider slow or silent --------------------------------------------------------------------

def client_config(**values) -> dict:
    return {"client_config": values}


def test_silent_provider_before_headers_is_a_504(client, fake):
    connector = openai_connector(fake, model=Scenario(first_delay_ms=3000).to_model(),
                                 **client_config(read_timeout=0.3))
    model_id = client.model_for(connector)
    for route in ("_predict/stream", "_predict"):
        reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/{route}", stream_body())
        assert reply.status == 504 and reply.body["status"] == 504, reply.body


def test_silent_provider_after_the_first_event_is_a_final_error_event(client, fake):
    connector = openai_connector(fake, model=Scenario(chunks=3, delay_ms=3000).to_model(),
                                 **client_config(read_timeout=0.3))
    model_id = client.model_for(connector)
    response = raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    events = response.events()
    assert response.status == 200 and response.complete
    assert dataasmap(events[0])["content"] == fake_tokens(Scenario(chunks=3))[0]
    assert "read timeout" in events[-1]["error"]


def test_heartbeats_keep_an_idle_stream_open(make_server, fake):
    server = make_server(heartbeat_interval=0.1)
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=3, delay_ms=500).to_model()))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    pings = [c for c in response.chunks if c == b": ping\n\n"]
    assert len(pings) >= 2
    assert [dataasmap(e)["content"] for e in response.events()[:-1]] == fake_tokens(Scenario(chunks=3))


# 5. provider fails -> retries before any token, never after -----------------------------------

def test_5xx_is_retried_per_client_config_then_passed_on(client, fake):
    connector = openai_connector(fake, model=Scenario(status=503).to_model(),
                                 **client_config(max_retry_times=2, retry_backoff_millis=10,
                                                 retry_backoff_policy="exponential_full_jitter"))
    model_id = client.model_for(connector)
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", stream_body())
    assert reply.status == 502 and "503" in reply.body["error"]["reason"]
    assert len(fake.stats.requests) == 3
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", stream_body())
    assert reply.status == 502 and len(fake.stats.requests) == 6
    assert 'mlstream_upstream_retries_total{status="503"} 4' in client.call("GET", "/metrics").body


def test_retry_after_beyond_the_retry_bound_is_passed_on_at_once(client, fake):
    connector = openai_connector(fake, model=Scenario(status=429, retry_after=30).to_model(),
                                 **client_config(max_retry_times=5, retry_timeout_seconds=1))
    model_id = client.model_for(connector)
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", stream_body())
    assert reply.status == 429 and reply.headers["Retry-After"] == "30"
    assert len(fake.stats.requests) == 1


def test_no_retry_after_a_token_was_sent(client, fake):
    connector = openai_connector(fake, model=Scenario(chunks=5, cut_after=2).to_model(),
                                 **client_config(max_retry_times=3, retry_backoff_millis=10))
    model_id = client.model_for(connector)
    response = raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert "error" in response.events()[-1]
    assert len(fake.stats.requests) == 1


# 6. overload -> fast refusal, FIFO backlog ----------------------------------------------------------

def metric(client: Client, name: str) -> float:
    for line in client.call("GET", "/metrics").body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_slices_wait_in_arrival_order_and_overflow_is_refused(make_server, fake):
    # One worker, held by a gzip-coded stream (a compressed body is read by a worker
    # that waits on it); two plain streams live meanwhile, their next slices waiting in
    # arrival order. More than the backlog (1) waiting: a new stream is refused at once.
    server = make_server(stream_workers=1, stream_backlog=1)
    client = Client(server.url)
    held = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=200, gzip=1).to_model()))
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=20).to_model()))

    def body(tag: str) -> dict:
        return {"parameters": {"messages": [{"role": "user", "content": tag}],
                               "_llm_interface": "openai/v1/chat/completions"}}

    first = post_stream(server.url, held, body("held"))
    assert first.recv(1)
    assert server.app.pool.wait_until(lambda pool: pool.running == 1, HANG_GUARD)
    second = post_stream(server.url, model_id, body("second"))
    assert server.app.pool.wait_until(lambda pool: pool.queued == 1, HANG_GUARD)
    third = post_stream(server.url, model_id, body("third"))
    with first, second, third:
        assert server.app.pool.wait_until(lambda pool: pool.queued == 2, HANG_GUARD)
        assert (metric(client, "mlstream_streams_active"), metric(client, "mlstream_streams_queued")) == (3, 2)
        started = time.monotonic()
        refused = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", body("fourth"))
        assert refused.status == 429 and refused.headers["Retry-After"]
        assert time.monotonic() - started < 1.0  # at once: no queueing, no timeout
        first.close()
        for sock in (second, third):
            with sock.makefile("rb") as reader:
                assert read_response(reader).complete
    order = [r.body["messages"][0]["content"] for r in fake.stats.requests]
    assert order == ["held", "second", "third"]


# 7. many concurrent slow streams ----------------------------------------------------------------

@pytest.mark.slow
def test_500_concurrent_slow_streams_all_complete(make_server, fake):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    count, chunks = 500, 20
    server = make_server(stream_workers=512, heartbeat_interval=5.0)
    client = Client(server.url)
    scenario = Scenario(chunks=chunks, delay_ms=100)
    model_id = client.model_for(openai_connector(fake, model=scenario.to_model()))
    expected = "".join(fake_tokens(scenario))
    payload = json.dumps(stream_body()).encode()
    request = (f"POST /_plugins/_ml/models/{model_id}/_predict/stream HTTP/1.1\r\nHost: x\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    host, port = server.url.removeprefix("http://").split(":")
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=HANG_GUARD)
        sock.sendall(request)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = bytearray()
    done: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + 60
    while len(done) < count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            sock = key.fileobj
            data = sock.recv(65536)
            buffers[sock] += data
            # the last chunk follows the previous chunk's CRLF (a header can end in "0")
            if not data or buffers[sock].endswith(b"\r\n0\r\n\r\n"):
                selector.unregister(sock)
                done[sock] = bytes(buffers[sock])
                sock.close()
    assert len(done) == count
    for raw in done.values():
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        text = body.decode()
        contents = [json.loads(line[6:]) for line in text.split("\r\n") if line.startswith("data: ")]
        assert "".join(dataasmap(e)["content"] for e in contents) == expected
        assert dataasmap(contents[-1])["is_last"]
    assert server.app.pool.wait_idle(HANG_GUARD)


# 8. graceful shutdown -------------------------------------------------------------------------------

def test_sigterm_drains_then_cancels_and_exits_0(tmp_path, fake):
    process = subprocess.Popen(
        [*MLSTREAM, "serve", "--port", "0", "--data-dir", str(tmp_path), "--trusted-endpoint", LOOPBACK_TRUST,
         "--allow-private-endpoints", "--drain-timeout", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().split()[-1]
        client = Client(url)
        short = client.model_for(openai_connector(fake, model=Scenario(chunks=4, delay_ms=100).to_model()))
        long = client.model_for(openai_connector(fake, model=Scenario(chunks=1000, delay_ms=50).to_model()))
        short_sock, long_sock = post_stream(url, short), post_stream(url, long)
        with short_sock, long_sock:
            assert short_sock.recv(1) and long_sock.recv(1)
            process.send_signal(signal.SIGTERM)
            with long_sock.makefile("rb") as reader:
                long_response = read_response_after_first_byte(reader)
            assert long_response.complete
            assert "shutting down" in long_response.events()[-1]["error"]
            with short_sock.makefile("rb") as reader:
                short_response = read_response_after_first_byte(reader)
            assert dataasmap(short_response.events()[-1])["is_last"]
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(tuple_of(url), timeout=HANG_GUARD)
        process.wait(timeout=HANG_GUARD)
        assert process.returncode == 0
    finally:
        process.kill()
        process.communicate()


def read_response_after_first_byte(reader):
    """read_response for a socket whose first byte ("H") was already taken by recv(1)."""
    class Prefixed:
        def __init__(self) -> None:
            self.first = True

        def readline(self) -> bytes:
            if self.first:
                self.first = False
                return b"H" + reader.readline()
            return reader.readline()

        def read(self, size: int) -> bytes:
            return reader.read(size)
    return read_response(Prefixed())


def tuple_of(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


# 9. the model rate limiter --------------------------------------------------------------------------

def test_model_rate_limiter_is_a_token_bucket_over_both_routes(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    model_id = client.register(connector_id, rate_limiter={"limit": "2", "unit": "MINUTES"})
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", stream_body()).status == 200
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", stream_body()).status == 200
    refused = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream", stream_body())
    assert refused.status == 429 and 1 <= int(refused.headers["Retry-After"]) <= 30
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", stream_body()).status == 429
    other = client.register(connector_id)  # limits are per model
    assert client.call("POST", f"/_plugins/_ml/models/{other}/_predict", stream_body()).status == 200
    assert len(fake.stats.requests) == 3
