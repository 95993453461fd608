"""The paced fake, proven by the openai SDK: streamed and whole answers at its pace, its key
checked, thousands of streams from its one thread, and a client that stops reading
stopping the stream's clock."""

from __future__ import annotations

import resource
import selectors
import socket
import threading
import time

import openai
import pytest

from mlstream.testing.fake_paced import MAX_BUFFERED, FakePaced, Pace

from ..support.timeouts import HANG_GUARD

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake():
    with FakePaced(pace=Pace(tokens=5, tps=200, first_ms=20)) as provider:
        yield provider


def sdk(fake: FakePaced, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url + "/v1", api_key=key or fake.api_key, max_retries=0, timeout=HANG_GUARD)


def test_a_stream_comes_at_its_pace_through_the_sdk(fake):
    started = time.monotonic()
    chunks = list(sdk(fake).chat.completions.create(model="paced?tokens=8&tps=100&first_ms=30", messages=MESSAGES,
                                                   stream=True, stream_options={"include_usage": True}))
    took = time.monotonic() - started
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(f"tok{i} " for i in range(8))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 8
    assert took >= 0.03 + 7 / 100  # not sooner than its pace (a lower bound only: no timer test)
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, HANG_GUARD)


def test_a_whole_answer_after_the_same_time(fake):
    answer = sdk(fake).chat.completions.create(model="paced?tokens=3", messages=MESSAGES)
    assert answer.choices[0].message.content == "tok0 tok1 tok2 "
    assert answer.usage.completion_tokens == 3


def test_a_wrong_key_is_refused_as_openai_does(fake):
    with pytest.raises(openai.AuthenticationError):
        sdk(fake, key="sk-wrong").chat.completions.create(model="paced", messages=MESSAGES)
    assert fake.stats.auth_failures == 1


def _request(model: str) -> bytes:
    body = ('{"model":"%s","messages":[{"role":"user","content":"hi"}],"stream":true}' % model).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-fake-paced\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def test_two_thousand_streams_at_once_from_its_one_thread(fake):
    count = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 3 * count)), hard))
    before = threading.active_count()
    selector = selectors.DefaultSelector()
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", fake.port), timeout=HANG_GUARD)
            sock.sendall(_request("paced?tokens=5&tps=50&first_ms=50"))
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, bytearray())
            socks.append(sock)
        assert fake.stats.wait_for(lambda s: s.streams_started == count, HANG_GUARD)
        assert threading.active_count() == before  # no thread per stream
        done = 0
        deadline = time.monotonic() + HANG_GUARD
        while done < count and time.monotonic() < deadline:
            for key, _ in selector.select(1.0):
                data = key.fileobj.recv(65536)
                key.data.extend(data)
                if key.data.endswith(b"0\r\n\r\n"):
                    selector.unregister(key.fileobj)
                    done += 1
        assert done == count
        assert fake.stats.chunks_written == 5 * count
    finally:
        for sock in socks:
            sock.close()
        selector.close()


def test_a_client_that_stops_reading_stops_its_streams_clock(fake):
    sock = socket.create_connection(("127.0.0.1", fake.port), timeout=HANG_GUARD)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        # Big enough to outgrow the socket buffers many times over, fast enough to try.
        sock.sendall(_request("paced?tokens=200000&tps=100000&first_ms=0"))
        assert fake.stats.wait_for(lambda s: s.streams_started == 1, HANG_GUARD)
        # Written grows until the socket buffers and MAX_BUFFERED are full, then stops.
        assert not fake.stats.wait_for(lambda s: s.streams_completed == 1, 0.5)
        written = fake.stats.chunks_written
        assert written < 200000
        chunk_bytes = 150  # about, per content chunk
        assert written * chunk_bytes < 100 * MAX_BUFFERED
    finally:
        sock.close()
