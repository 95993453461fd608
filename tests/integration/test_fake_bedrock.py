"""The fake Bedrock runtime, proven faithful with the real boto3 client over loopback.

boto3 is the reference: if ``bedrock-runtime`` signs, sends, parses and raises against
the fake exactly as it does against AWS, a gateway tested against the fake is tested
against the protocol. Faults boto3 hides (a truncated frame, a bad CRC, a cut
connection) are read with http.client and decoded with botocore's EventStreamBuffer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError
from urllib3.exceptions import ProtocolError

from mlstream.testing import fake_openai
from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock, Scenario, fake_tokens

from ..support.aws import isolate_aws_environment

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "Tell me about Hamlet in one paragraph"}]}]
TIMEOUT = 5.0  # hang guard for every socket and wait; no test should come near it


@pytest.fixture(autouse=True)
def _isolated_aws_environment(monkeypatch, tmp_path):
    """boto3 must see only the credentials and endpoint each test passes."""
    isolate_aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    """A fresh fake per test: connections a previous test's client still holds, or a
    stream it abandoned, can never leak into this test's stats."""
    with FakeBedrock() as fake:
        yield fake


def make_client(fake: FakeBedrock, *, secret_key: str | None = None, access_key: str | None = None, token=None):
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=fake.url,
        aws_access_key_id=access_key or fake.access_key,
        aws_secret_access_key=secret_key or fake.secret_key,
        aws_session_token=token,
        # No retries: in botocore's legacy mode {"max_attempts": 1} still means one
        # retry after a random back-off; total_max_attempts counts the first try.
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=TIMEOUT, read_timeout=TIMEOUT),
    )


def stream_events(client, **knobs) -> list[dict]:
    extra = {"additionalModelRequestFields": {"fake": knobs}} if knobs else {}
    response = client.converse_stream(modelId=MODEL_ID, messages=MESSAGES, **extra)
    return list(response["stream"])


def event_names(events: list[dict]) -> list[str]:
    return [next(iter(event)) for event in events]


def text_of(events: list[dict]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"]["text"]
        for e in events
        if "contentBlockDelta" in e and "text" in e["contentBlockDelta"]["delta"]
    )


# -- the happy paths, through boto3 ---------------------------------------------------


def test_converse_returns_the_full_text(bedrock):
    response = make_client(bedrock).converse(modelId=MODEL_ID, messages=MESSAGES)
    assert response["output"]["message"] == {"role": "assistant", "content": [{"text": DEFAULT_TEXT}]}
    assert response["stopReason"] == "end_turn"
    usage = response["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert response["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/json"


def test_converse_stream_yields_every_event_in_order(bedrock):
    events = stream_events(make_client(bedrock))
    tokens = fake_tokens(Scenario())
    assert "".join(tokens) == DEFAULT_TEXT
    assert event_names(events) == (
        ["messageStart"] + ["contentBlockDelta"] * len(tokens) + ["contentBlockStop", "messageStop", "metadata"]
    )
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert [e["contentBlockDelta"] for e in events[1:-3]] == [
        {"delta": {"text": token}, "contentBlockIndex": 0} for token in tokens
    ]
    assert events[-3] == {"contentBlockStop": {"contentBlockIndex": 0}}
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    usage = events[-1]["metadata"]["usage"]
    assert usage["outputTokens"] == len(tokens)
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert events[-1]["metadata"]["metrics"]["latencyMs"] >= 1
    assert bedrock.stats.wait_for(lambda s: s.streams_completed == 1, TIMEOUT)
    assert bedrock.stats.streams_started == 1
    assert bedrock.stats.frames_written == len(tokens) + 4


@pytest.mark.parametrize(
    "knobs",
    [
        pytest.param({"chunks": 5, "chunk_bytes": 16}, id="chunk-bytes"),
        pytest.param({"chunks": 7}, id="chunks-without-text"),
        pytest.param({"chunks": 4, "text": "To be, or not to be"}, id="chunks-with-text"),
        pytest.param({"text": "Alas, poor Yorick! "}, id="text-by-word"),
    ],
)
def test_body_knobs_shape_the_stream(bedrock, knobs):
    events = stream_events(make_client(bedrock), **knobs)
    expected = fake_tokens(Scenario(**knobs))
    deltas = [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e]
    assert deltas == expected


def test_fake_tokens_rules():
    assert fake_tokens(Scenario(chunks=3)) == ["w0", " w1", " w2"]
    assert fake_tokens(Scenario(chunks=2, chunk_bytes=8)) == ["c0 lorem", "c1 lorem"]
    assert fake_tokens(Scenario(chunks=3, text="abcdefg")) == ["abc", "de", "fg"]
    assert fake_tokens(Scenario(text=" to be  ")) == [" to", " be  "]
    assert "".join(fake_tokens(Scenario())) == DEFAULT_TEXT
    with pytest.raises(ValueError):
        Scenario(text="x", chunk_bytes=4)


@pytest.mark.parametrize(
    "knobs",
    [{}, {"chunks": 3}, {"chunks": 5, "text": "abcdefghijk"}, {"chunk_bytes": 40}, {"text": "  a b  "}],
    ids=["default", "chunks", "chunks-text", "chunk-bytes", "text"],
)
def test_tokens_match_the_fake_openai_provider(knobs):
    """One scenario relayed from either provider must carry the same answer."""
    assert fake_tokens(Scenario(**knobs)) == list(fake_openai.fake_tokens(fake_openai.Scenario(**knobs)))


def test_header_knobs_win_over_body_knobs(bedrock):
    client = make_client(bedrock)

    def add_fake_header(request, **_):
        request.headers["X-Fake-Chunks"] = "3"
        request.headers["X-Fake-Text"] = quote("Frailty, thy name is wóman")

    client.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_fake_header)
    events = stream_events(client, chunks=9)
    assert event_names(events).count("contentBlockDelta") == 3
    assert text_of(events) == "Frailty, thy name is wóman"
    assert bedrock.stats.requests[-1].headers["x-fake-chunks"] == "3"


def test_default_scenario_applies_when_the_request_says_nothing(bedrock):
    bedrock.default_scenario = Scenario(text="Brevity is the soul of wit.", chunks=2)
    events = stream_events(make_client(bedrock))
    assert [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e] == [
        "Brevity is the",
        " soul of wit.",
    ]


def test_tool_use_block_is_parsed_by_boto3(bedrock):
    tool = {"name": "get_weather", "input": {"city": "Elsinore", "unit": "celsius"}, "tool_use_id": "tooluse_1"}
    events = stream_events(make_client(bedrock), chunks=2, tool_use=tool)
    names = event_names(events)
    assert names == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert events[4] == {
        "contentBlockStart": {
            "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}},
            "contentBlockIndex": 1,
        }
    }
    fragments = [e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events[5:8]]
    assert all(e["contentBlockDelta"]["contentBlockIndex"] == 1 for e in events[5:8])
    assert json.loads("".join(fragments)) == tool["input"]
    assert events[8] == {"contentBlockStop": {"contentBlockIndex": 1}}
    assert events[9] == {"messageStop": {"stopReason": "tool_use"}}


def test_converse_answers_tool_use_too(bedrock):
    tool = {"name": "lookup", "input": {"q": "Yorick"}}
    response = make_client(bedrock).converse(
        modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": {"tool_use": tool}}
    )
    content = response["output"]["message"]["content"]
    assert content[1]["toolUse"]["name"] == "lookup"
    assert content[1]["toolUse"]["input"] == {"q": "Yorick"}
    assert response["stopReason"] == "tool_use"


def test_the_request_is_recorded_as_sent(bedrock):
    make_client(bedrock).converse_stream(
        modelId=MODEL_ID, messages=MESSAGES, inferenceConfig={"maxTokens": 64, "temperature": 0.5}
    )["stream"].close()
    recorded = bedrock.stats.requests[-1]
    assert recorded.method == "POST"
    assert recorded.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
    assert recorded.model_id == MODEL_ID
    assert recorded.operation == "converse-stream"
    assert recorded.body["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.5}
    assert recorded.body["messages"] == MESSAGES
    assert recorded.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDFAKEBEDROCK/")
    assert "host" in recorded.headers


# -- authentication -------------------------------------------------------------------


def test_a_wrong_secret_is_refused_with_403(bedrock):
    with pytest.raises(ClientError) as caught:
        make_client(bedrock, secret_key="not-the-secret").converse(modelId=MODEL_ID, messages=MESSAGES)
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert response["Error"]["Code"] == "InvalidSignatureException"
    assert response["Error"]["Message"].startswith("The request signature we calculated does not match")
    assert bedrock.stats.signature_failures == 1
    assert "signature mismatch" in bedrock.stats.signature_failure_reasons[0]


def test_an_unknown_access_key_is_an_unrecognized_client(bedrock):
    with pytest.raises(ClientError) as caught:
        make_client(bedrock, access_key="AKIDSOMEONEELSE").converse_stream(modelId=MODEL_ID, messages=MESSAGES)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert caught.value.response["Error"]["Code"] == "UnrecognizedClientException"
    assert bedrock.stats.streams_started == 0


def test_a_configured_session_token_is_required():
    with FakeBedrock(session_token="session-token-123") as fake:
        with pytest.raises(ClientError) as missing:
            make_client(fake).converse(modelId=MODEL_ID, messages=MESSAGES)
        assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert missing.value.response["Error"]["Code"] == "UnrecognizedClientException"

        with pytest.raises(ClientError) as wrong:
            make_client(fake, token="another-token").converse(modelId=MODEL_ID, messages=MESSAGES)
        assert wrong.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

        events = stream_events(make_client(fake, token="session-token-123"))
        assert event_names(events)[-1] == "metadata"
        signed_headers = fake.stats.requests[-1].headers["authorization"].split("SignedHeaders=")[1]
        assert "x-amz-security-token" in signed_headers.split(",")[0].split(";")


# -- errors in Bedrock's shape ---------------------------------------------------------


def test_throttle_http_is_a_throttling_exception(bedrock):
    client = make_client(bedrock)
    bedrock.default_scenario = Scenario(throttle="http")
    with pytest.raises(client.exceptions.ThrottlingException) as caught:
        client.converse_stream(modelId=MODEL_ID, messages=MESSAGES)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert caught.value.response["Error"]["Message"] == "Too many requests, please wait before trying again."
    with pytest.raises(client.exceptions.ThrottlingException):
        client.converse(modelId=MODEL_ID, messages=MESSAGES)
    assert bedrock.stats.streams_started == 0
    assert len(bedrock.stats.requests) == 2  # one per call: nothing retried


@pytest.mark.parametrize(
    "exception_type", ["modelStreamErrorException", "throttlingException", "validationException"]
)
def test_exception_after_raises_the_modeled_exception_mid_iteration(bedrock, exception_type):
    response = make_client(bedrock).converse_stream(
        modelId=MODEL_ID,
        messages=MESSAGES,
        additionalModelRequestFields={"fake": {"exception_after": 3, "exception_type": exception_type}},
    )
    seen = []
    with pytest.raises(EventStreamError) as caught:
        for event in response["stream"]:
            seen.append(event)
    assert event_names(seen) == ["messageStart"] + ["contentBlockDelta"] * 3
    assert text_of(seen) == "".join(fake_tokens(Scenario())[:3])
    assert caught.value.response["Error"]["Code"] == exception_type
    assert bedrock.stats.streams_completed == 0


def test_exception_after_zero_is_the_first_frame(bedrock):
    response = make_client(bedrock).converse_stream(
        modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": {"exception_after": 0}}
    )
    with pytest.raises(EventStreamError) as caught:
        next(iter(response["stream"]))
    assert caught.value.response["Error"]["Code"] == "modelStreamErrorException"


def test_converse_turns_exception_after_into_an_http_error(bedrock):
    client = make_client(bedrock)
    with pytest.raises(client.exceptions.ModelErrorException) as caught:
        client.converse(
            modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": {"exception_after": 1}}
        )
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424


def test_a_bad_knob_is_a_validation_exception(bedrock):
    client = make_client(bedrock)
    with pytest.raises(client.exceptions.ValidationException) as caught:
        client.converse_stream(
            modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": {"chunkz": 3}}
        )
    assert "chunkz" in caught.value.response["Error"]["Message"]


# -- raw HTTP: what boto3 validates or hides ----------------------------------------------


@contextlib.contextmanager
def signed_request(
    fake: FakeBedrock, body: bytes, *, path: str | None = None
) -> Iterator[tuple[http.client.HTTPConnection, http.client.HTTPResponse]]:
    """Sign like a gateway would (botocore's SigV4Auth), send with http.client, and
    yield the connection and its response; the connection is closed afterwards."""
    if path is None:
        path = f"/model/{quote(MODEL_ID, safe='')}/converse-stream"
    request = AWSRequest(
        method="POST", url=f"{fake.url}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    SigV4Auth(Credentials(fake.access_key, fake.secret_key), "bedrock", fake.region).add_auth(request)
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=TIMEOUT)
    try:
        connection.request("POST", path, body=body, headers=dict(request.headers.items()))
        yield connection, connection.getresponse()
    finally:
        connection.close()


def scenario_body(**knobs) -> bytes:
    return json.dumps({"messages": MESSAGES, "additionalModelRequestFields": {"fake": knobs}}).encode()


def event_types(messages: list) -> list[str]:
    return [message.headers[":event-type"] for message in messages]


def decode_all(data: bytes) -> tuple[list, int]:
    """Decode frames with botocore; return (messages, bytes they covered)."""
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    messages = list(buffer)
    return messages, sum(m.prelude.total_length for m in messages)


def test_a_body_without_messages_is_a_validation_exception(bedrock):
    with signed_request(bedrock, b'{"inferenceConfig": {}}') as (_, response):
        assert response.status == 400
        assert response.getheader("x-amzn-ErrorType") == "ValidationException"
        assert "messages" in json.loads(response.read())["message"]


def test_an_unknown_route_is_resource_not_found(bedrock):
    with signed_request(bedrock, scenario_body(), path="/model/x/invoke-nothing") as (_, response):
        assert response.status == 404
        assert response.getheader("x-amzn-ErrorType") == "ResourceNotFoundException"
        assert "message" in json.loads(response.read())


def test_each_frame_is_one_http_chunk(bedrock):
    """Read the chunked body by hand: every chunk must hold exactly one whole frame."""
    body = scenario_body(chunks=4)
    request = AWSRequest(
        method="POST",
        url=f"{bedrock.url}/model/{quote(MODEL_ID, safe='')}/converse-stream",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    SigV4Auth(Credentials(bedrock.access_key, bedrock.secret_key), "bedrock", bedrock.region).add_auth(request)
    head = [f"POST /model/{quote(MODEL_ID, safe='')}/converse-stream HTTP/1.1", f"Host: 127.0.0.1:{bedrock.port}"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    head += [f"Content-Length: {len(body)}", "Connection: close"]
    with socket.create_connection(("127.0.0.1", bedrock.port), timeout=TIMEOUT) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        reader = sock.makefile("rb")
        status = reader.readline()
        assert status.startswith(b"HTTP/1.1 200")
        headers = {}
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        assert headers["content-type"] == "application/vnd.amazon.eventstream"
        assert headers["transfer-encoding"] == "chunked"
        chunks = []
        while True:
            size = int(reader.readline().strip(), 16)
            data = reader.read(size)
            assert reader.read(2) == b"\r\n"
            if size == 0:
                break
            chunks.append(data)
    assert len(chunks) == 4 + 4
    for chunk in chunks:
        messages, covered = decode_all(chunk)
        assert len(messages) == 1 and covered == len(chunk)
        # Real Bedrock pads payloads with "p"; clients must ignore it, so we send it.
        assert "p" in json.loads(messages[0].payload)


def test_exception_after_ends_the_body_properly(bedrock):
    with signed_request(bedrock, scenario_body(exception_after=2)) as (_, response):
        assert response.status == 200
        data = response.read()  # no IncompleteRead: the terminating chunk came
    messages, covered = decode_all(data)
    assert covered == len(data)
    assert event_types(messages[:-1]) == ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    assert messages[-1].headers == {
        ":exception-type": "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    assert "message" in json.loads(messages[-1].payload)


def test_truncate_after_leaves_half_a_frame_and_no_message_stop(bedrock):
    with signed_request(bedrock, scenario_body(truncate_after=2)) as (_, response):
        assert response.status == 200
        data = response.read()  # the chunked body ends properly
    messages, covered = decode_all(data)
    assert event_types(messages) == ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    assert 0 < len(data) - covered  # the tail is half a frame botocore cannot complete
    assert bedrock.stats.streams_completed == 0


def test_bad_crc_after_fails_botocores_checksum(bedrock):
    with signed_request(bedrock, scenario_body(bad_crc_after=2)) as (_, response):
        data = response.read()
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    good = [next(buffer) for _ in range(3)]
    assert event_types(good) == ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    with pytest.raises(ChecksumMismatch):
        next(buffer)


def test_cut_after_ends_the_connection_mid_body(bedrock):
    with signed_request(bedrock, scenario_body(cut_after=2)) as (_, response):
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead) as caught:
            response.read()
    messages, covered = decode_all(caught.value.partial)
    assert event_types(messages) == ["messageStart", "contentBlockDelta", "contentBlockDelta"]
    assert covered == len(caught.value.partial)
    assert bedrock.stats.wait_for(lambda s: s.connections_closed >= 1, TIMEOUT)
    assert bedrock.stats.streams_completed == 0


def test_boto3_sees_a_cut_stream_as_an_error(bedrock):
    response = make_client(bedrock).converse_stream(
        modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": {"cut_after": 1}}
    )
    with pytest.raises(ProtocolError):  # urllib3: "Response ended prematurely"
        list(response["stream"])


# -- pauses, disconnects, lifecycle ---------------------------------------------------


def test_a_client_leaving_during_a_pause_is_noticed(bedrock):
    with signed_request(bedrock, scenario_body(delay_ms=60_000)) as (connection, response):
        assert response.status == 200
        assert bedrock.stats.wait_for(lambda s: s.frames_written == 2, TIMEOUT)  # messageStart, delta 1
        connection.sock.shutdown(socket.SHUT_RDWR)
    assert bedrock.stats.wait_for(lambda s: s.client_disconnects == 1, TIMEOUT)
    assert bedrock.stats.streams_completed == 0


def test_first_delay_holds_back_the_headers(bedrock):
    started = time.monotonic()
    with signed_request(bedrock, scenario_body(first_delay_ms=150, chunks=1)) as (_, response):
        assert response.status == 200
        response.read()
    assert time.monotonic() - started >= 0.15


def test_keep_alive_serves_many_requests_on_one_connection(bedrock):
    client = make_client(bedrock)
    for _ in range(3):
        assert text_of(stream_events(client, chunks=2)) == "w0 w1"
    assert bedrock.stats.wait_for(lambda s: s.streams_completed == 3, TIMEOUT)
    assert (bedrock.stats.connections_open, bedrock.stats.connections_closed) == (1, 0)


def test_stop_ends_a_paused_stream_promptly_and_is_safe_twice():
    fake = FakeBedrock()
    outcome: dict[str, object] = {}

    def read_stream():
        with signed_request(fake, scenario_body(delay_ms=60_000)) as (_, response):
            try:
                response.read()
            except (http.client.IncompleteRead, OSError) as error:
                outcome["error"] = error

    with fake:
        reader = threading.Thread(target=read_stream, daemon=True)
        reader.start()
        assert fake.stats.wait_for(lambda s: s.streams_started == 1, TIMEOUT)
        started = time.monotonic()
        fake.stop()
        assert time.monotonic() - started < 2.0
    # __exit__ stopped it a second time.
    reader.join(TIMEOUT)
    assert not reader.is_alive()
    assert isinstance(outcome.get("error"), http.client.IncompleteRead)
    assert fake.stats.client_disconnects == 0  # our own stop is not the client leaving
    assert fake.stats.wait_for(lambda s: s.connections_open == 0, TIMEOUT)


def test_only_loopback_is_served():
    with pytest.raises(ValueError):
        FakeBedrock(host="0.0.0.0")
    with FakeBedrock() as fake:
        assert fake.url == f"http://127.0.0.1:{fake.port}"


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(dict(chunks=0), id="no-deltas"),
        pytest.param(dict(chunks=3, text="a b c d e f g"), id="grouped"),
        pytest.param(dict(chunks=5, text="  padded  text  "), id="whitespace"),
        pytest.param(dict(chunks=4, text="x"), id="one-word-repeated"),
    ],
)
def test_fake_tokens_join_to_the_answer(bedrock, scenario):
    tokens = fake_tokens(Scenario(**scenario))
    assert len(tokens) == scenario["chunks"]
    response = make_client(bedrock).converse(
        modelId=MODEL_ID, messages=MESSAGES, additionalModelRequestFields={"fake": scenario}
    )
    assert response["output"]["message"]["content"][0]["text"] == "".join(tokens)


def test_reasoning_deltas_parse_as_reasoning_content(bedrock):
    events = stream_events(make_client(bedrock), reasoning="Think first.", chunks=2)
    deltas = [e["contentBlockDelta"] for e in events if "contentBlockDelta" in e]
    assert [d["delta"]["reasoningContent"] for d in deltas[:3]] == [
        {"text": "Think"}, {"text": " first."}, {"signature": "fake-signature"}]
    assert all(d["contentBlockIndex"] == 0 for d in deltas[:3])
    assert [d["delta"]["text"] for d in deltas[3:]] == fake_tokens(Scenario(chunks=2))
    assert all(d["contentBlockIndex"] == 1 for d in deltas[3:])
    whole = make_client(bedrock).converse(modelId=MODEL_ID, messages=MESSAGES,
                                          additionalModelRequestFields={"fake": {"reasoning": "Think first."}})
    assert whole["output"]["message"]["content"][0]["reasoningContent"]["reasoningText"]["text"] == "Think first."
