"""What OpenSearch clients send besides plain JSON, over real sockets: compressed bodies,
Accept-Encoding, a trailing slash, filter_path, pretty, error_trace and human."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from mlstream.testing.fake_openai import DEFAULT_TEXT

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import stream_body
from ..support.wire import raw_request

CONNECTORS = "/_plugins/_ml/connectors"


def test_a_gzip_body_is_read_as_its_json(server, fake):
    body = gzip.compress(json.dumps(openai_connector(fake)).encode())
    response = raw_request(server.url, "POST", f"{CONNECTORS}/_create", body, headers={"Content-Encoding": "gzip"})
    assert response.status == 200, response.body
    connector_id = json.loads(response.body)["connector_id"]
    assert Client(server.url).ok("GET", f"{CONNECTORS}/{connector_id}")["name"] == "OpenAI Chat Connector"


def test_a_deflate_body_chunked(server, fake):
    body = zlib.compress(json.dumps(openai_connector(fake)).encode())
    response = raw_request(server.url, "POST", f"{CONNECTORS}/_create", body, headers={"Content-Encoding": "deflate"},
                           chunked_request=True)
    assert response.status == 200, response.body


def test_a_gzip_bomb_is_413_and_creates_nothing(make_server):
    server = make_server(max_body_bytes=64 * 1024)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(b'{"name": "' + b"a" * (8 * 1024 * 1024)) + compressor.flush()
    assert len(bomb) < 64 * 1024  # the compressed body itself is within the limit
    response = raw_request(server.url, "POST", f"{CONNECTORS}/_create", bomb, headers={"Content-Encoding": "gzip"})
    assert response.status == 413
    assert json.loads(response.body)["error"]["type"] == "content_too_long_exception"
    assert Client(server.url).ok("POST", f"{CONNECTORS}/_search", {})["hits"]["total"]["value"] == 0


@pytest.mark.parametrize("encoding, status", [("br", 415), ("gzip", 400)], ids=["unknown-coding", "not-gzip"])
def test_a_body_it_cannot_decode(server, encoding, status):
    response = raw_request(server.url, "POST", f"{CONNECTORS}/_create", b'{"name": "x"}',
                           headers={"Content-Encoding": encoding})
    assert response.status == status
    assert json.loads(response.body)["status"] == status


def test_replies_are_gzipped_only_when_asked(server):
    asked = raw_request(server.url, "GET", "/", headers={"Accept-Encoding": "gzip"})
    assert asked.headers["content-encoding"] == "gzip" and asked.headers["vary"] == "Accept-Encoding"
    assert int(asked.headers["content-length"]) == len(asked.body)
    assert json.loads(gzip.decompress(asked.body))["version"]["distribution"] == "opensearch"
    plain = raw_request(server.url, "GET", "/")
    assert "content-encoding" not in plain.headers
    assert json.loads(plain.body)["version"]["distribution"] == "opensearch"
    refused = raw_request(server.url, "GET", "/", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "content-encoding" not in refused.headers


def test_an_error_is_gzipped_too(server):
    response = raw_request(server.url, "GET", "/_plugins/_ml/models/nope", headers={"Accept-Encoding": "gzip"})
    assert response.status == 404 and response.headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(response.body))["error"]["type"] == "resource_not_found_exception"


def stream_model(server, fake) -> str:
    return Client(server.url).model_for(openai_connector(fake))


def test_a_stream_is_not_compressed_unless_asked(server, fake):
    model_id = stream_model(server, fake)
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert "content-encoding" not in response.headers
    assert "".join(e["inference_results"][0]["output"][0]["dataAsMap"]["content"]
                   for e in response.events()) == DEFAULT_TEXT


def test_a_gzip_stream_flushes_every_event(server, fake):
    """Each HTTP chunk decompresses, on its own and at once, to whole SSE events: compression
    holds nothing back until a later event or the end."""
    model_id = stream_model(server, fake)
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers={"Accept-Encoding": "gzip"})
    assert response.status == 200 and response.complete
    assert response.headers["content-encoding"] == "gzip"
    decoder = zlib.decompressobj(31)
    events = []
    for chunk in response.chunks:
        text = decoder.decompress(chunk).decode()
        assert text == "" or text.endswith("\n\n"), text  # "" only for the gzip trailer
        events += [json.loads(block.removeprefix("data: ")) for block in text.split("\n\n") if block]
    assert decoder.eof and not decoder.unused_data
    maps = [e["inference_results"][0]["output"][0]["dataAsMap"] for e in events]
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT and maps[-1]["is_last"] is True
    assert gzip.decompress(response.body).count(b"data: ") == len(events)


def test_a_trailing_slash_is_ignored(server, fake):
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))
    assert client.ok("GET", f"{CONNECTORS}/{connector_id}/")["name"] == "OpenAI Chat Connector"
    model_id = client.register(connector_id)
    reply = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict/", {"parameters": {"messages": []}})
    assert reply["inference_results"][0]["status_code"] == 200
    assert client.ok("GET", "//")["version"]["distribution"] == "opensearch"


def test_filter_path(server, fake):
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))
    found = client.ok("POST", f"{CONNECTORS}/_search?filter_path=hits.hits._id,hits.total.value", {})
    assert found == {"hits": {"total": {"value": 1}, "hits": [{"_id": connector_id}]}}
    trimmed = client.ok("GET", f"{CONNECTORS}/{connector_id}?filter_path=-actions,-parameters,-*_time,-client_*")
    assert set(trimmed) == {"name", "description", "version", "protocol"}
    assert client.ok("GET", "/?filter_path=nothing") == {}
    error = client.call("GET", "/_plugins/_ml/models/nope?filter_path=status")
    # OpenSearch never filters an error body (AbstractRestChannel.newErrorBuilder)
    assert error.status == 404 and error.body["error"]["type"] and error.body["status"] == 404


def test_pretty(server):
    response = raw_request(server.url, "GET", "/?pretty")
    assert response.body.startswith(b'{\n  "name" : ') and response.body.endswith(b"}\n")
    assert raw_request(server.url, "GET", "/?pretty=false").body.startswith(b'{"name":')


def test_error_trace_names_the_error_without_frames(server):
    plain = Client(server.url).call("GET", "/_plugins/_ml/models/nope")
    assert "stack_trace" not in plain.body["error"]
    traced = Client(server.url).call("GET", "/_plugins/_ml/models/nope?error_trace=true")
    trace = traced.body["error"]["stack_trace"]
    assert trace.startswith("mlstream.errors.NotFound: Fail to find model") and "File " not in trace


def test_human_is_accepted_and_invalid_flags_refused(server):
    client = Client(server.url)
    assert client.ok("GET", "/?human=true") == client.ok("GET", "/")
    refused = client.call("GET", "/?pretty=maybe")
    assert refused.status == 400 and "[pretty]" in refused.body["error"]["reason"]
    refused = client.call("GET", "/?filter_path=a..b")
    assert refused.status == 400


def test_an_empty_body_with_a_content_encoding_is_just_empty(server):
    response = raw_request(server.url, "GET", "/_plugins/_ml/models/_search", headers={"Content-Encoding": "gzip"})
    assert response.status == 200
