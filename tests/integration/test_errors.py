"""Every error is API.md's JSON body, with the right status, on every route.

That includes the server's own HTTP protocol errors (the stdlib writes HTML for
those by default), checked over raw sockets so the exact bytes are seen.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

import pytest

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import RawResponse, raw_request, read_response

ML = "/_plugins/_ml"
WRONG_KEY = "sk-wrong-key-9d8c7b6a5f4e3d2c1b0a"


# --- helpers ---------------------------------------------------------------------------

def assert_json_error(status: int, headers: Any, body: bytes, expected: int, *words: str) -> dict:
    """``body`` is exactly ``{"error": {"type", "reason", ...}, "status": expected}``."""
    assert status == expected, (status, body[:500])
    content_type = headers.get("content-type") or headers.get("Content-Type")
    assert content_type and content_type.startswith("application/json"), (content_type, body[:200])
    assert b"<html" not in body.lower() and b"<!doctype" not in body.lower(), body[:200]
    doc = json.loads(body.decode("utf-8"))
    assert isinstance(doc, dict) and doc["status"] == expected, doc
    error = doc["error"]
    assert isinstance(error["type"], str) and error["type"], doc
    assert isinstance(error["reason"], str) and error["reason"], doc
    for word in words:
        assert word.lower() in error["reason"].lower(), (word, error["reason"])
    return doc


def call(client: Client, method: str, path: str, document: Any = None, **kwargs: Any):
    """(status, headers, raw bytes) through urllib3, like any client; ``document`` goes as JSON."""
    if document is not None:
        kwargs["json"] = document
    response = client.http.request(method, client.base_url + path, **kwargs)
    return response.status, response.headers, response.data


def expect_error(client: Client, method: str, path: str, document: Any, status: int, *words: str,
                 **kwargs: Any) -> dict:
    got_status, headers, data = call(client, method, path, document, **kwargs)
    return assert_json_error(got_status, headers, data, status, *words)


def raw_exchange(url: str, data: bytes) -> RawResponse:
    """Send ``data`` as-is on a fresh connection and read one response."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        sock.sendall(data)
        reader = sock.makefile("rb")
        assert reader.peek(1), "the server closed the connection without sending any response"
        return read_response(reader)


def host_header(url: str) -> str:
    return url.removeprefix("http://")


def predict_body() -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES}}


# --- routes ----------------------------------------------------------------------------

@pytest.mark.parametrize("method, path", [
    ("GET", "/no/such/route"),
    ("POST", "/_plugins/_ml/nothing_here"),
    ("GET", "/_plugins/_ml/models/abc/def/ghi"),
    ("DELETE", "/_cluster/nodes"),
])
def test_unknown_route_is_404(client, method, path):
    expect_error(client, method, path, None, 404)


@pytest.mark.parametrize("method, path, allowed", [
    ("DELETE", "/_cluster/settings", {"GET", "PUT"}),
    ("POST", "/_cluster/settings", {"GET", "PUT"}),
    ("GET", f"{ML}/models/abc/_predict", {"POST"}),
    ("GET", f"{ML}/models/abc/_predict/stream", {"POST"}),
    ("PATCH", f"{ML}/connectors/abc", {"GET", "PUT", "DELETE"}),
    ("POST", "/healthz", {"GET"}),
])
def test_wrong_method_is_405_with_allow(client, method, path, allowed):
    status, headers, data = call(client, method, path)
    assert_json_error(status, headers, data, 405)
    assert "Allow" in headers, headers
    assert {m.strip() for m in headers["Allow"].split(",")} >= allowed


def test_head_on_a_known_route_is_not_an_error(client):
    status, headers, data = call(client, "HEAD", "/healthz")
    assert status == 200 and data == b""


# --- request bodies --------------------------------------------------------------------

@pytest.mark.parametrize("path", [f"{ML}/connectors/_create", f"{ML}/models/_register",
                                  f"{ML}/models/abc/_predict", "/_cluster/settings"])
@pytest.mark.parametrize("payload", [b"{", b'{"name": }', b"{'single': 'quotes'}", b"not json at all",
                                     b'{"a": 1} trailing'])
def test_malformed_json_is_400(client, path, payload):
    method = "PUT" if path == "/_cluster/settings" else "POST"
    expect_error(client, method, path, None, 400, body=payload,
                 headers={"Content-Type": "application/json"})


def test_non_utf8_body_is_400(client):
    payload = b'{"name": "caf\xe9 \xff\xfe"}'
    doc = expect_error(client, "POST", f"{ML}/connectors/_create", None, 400, body=payload,
                       headers={"Content-Type": "application/json"})
    assert "utf-8" in doc["error"]["reason"].lower()


@pytest.mark.parametrize("method, path", [
    ("POST", f"{ML}/connectors/_create"),
    ("POST", f"{ML}/models/_register"),
    ("PUT", "/_cluster/settings"),
])
@pytest.mark.parametrize("body", [[1, 2], "a string", 42, True])
def test_body_that_is_not_an_object_is_400(client, method, path, body):
    expect_error(client, method, path, body, 400)


@pytest.mark.parametrize("method, path", [
    ("POST", f"{ML}/connectors/_create"),
    ("POST", f"{ML}/models/_register"),
    ("PUT", "/_cluster/settings"),
])
def test_missing_body_is_400(client, method, path):
    expect_error(client, method, path, None, 400)


def test_predict_body_that_is_not_an_object_is_400(client, fake):
    model_id = client.model_for(openai_connector(fake))
    for route in ("_predict", "_predict/stream"):
        for body in ([1], "text", 3):
            expect_error(client, "POST", f"{ML}/models/{model_id}/{route}", body, 400)
        expect_error(client, "POST", f"{ML}/models/{model_id}/{route}", {"parameters": [1]}, 400,
                     "parameters")
    assert fake.stats.requests == []


@pytest.mark.parametrize("field", ["name", "protocol", "actions"])
def test_connector_missing_required_field_is_400_naming_it(client, fake, field):
    body = openai_connector(fake)
    del body[field]
    expect_error(client, "POST", f"{ML}/connectors/_create", body, 400, field)


@pytest.mark.parametrize("field", ["action_type", "method", "url"])
def test_connector_action_missing_required_field_is_400_naming_it(client, fake, field):
    body = openai_connector(fake)
    del body["actions"][0][field]
    expect_error(client, "POST", f"{ML}/connectors/_create", body, 400, field)


@pytest.mark.parametrize("field, value", [
    ("parameters", "text"), ("credential", ["x"]), ("actions", {}), ("client_config", 7),
    ("version", {"major": 1}),
])
def test_connector_invalid_field_is_400_naming_it(client, fake, field, value):
    body = openai_connector(fake)
    body[field] = value
    expect_error(client, "POST", f"{ML}/connectors/_create", body, 400, field)


def test_register_missing_name_is_400_naming_it(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    expect_error(client, "POST", f"{ML}/models/_register",
                 {"function_name": "remote", "connector_id": connector_id}, 400, "name")


# --- templating --------------------------------------------------------------------------

@pytest.mark.parametrize("route", ["_predict", "_predict/stream"])
def test_unfilled_placeholder_is_400_naming_it_and_nothing_is_sent(client, fake, route):
    model_id = client.model_for(openai_connector(fake))
    parameters = {} if route == "_predict" else {"_llm_interface": "openai/v1/chat/completions"}
    expect_error(client, "POST", f"{ML}/models/{model_id}/{route}", {"parameters": parameters}, 400,
                 "messages")
    assert fake.stats.requests == []


@pytest.mark.parametrize("route", ["_predict", "_predict/stream"])
def test_request_body_rendering_to_invalid_json_is_400_and_nothing_is_sent(client, fake, route):
    model_id = client.model_for(openai_connector(fake))
    # a string is inserted as it is: `"messages": not json` is not JSON
    parameters = {"messages": "not json", "_llm_interface": "openai/v1/chat/completions"}
    doc = expect_error(client, "POST", f"{ML}/models/{model_id}/{route}", {"parameters": parameters}, 400)
    assert "json" in doc["error"]["reason"].lower()
    assert fake.stats.requests == []


def test_unfilled_placeholder_in_a_header_is_400_naming_it(client, fake):
    connector = openai_connector(fake, headers={"OpenAI-Organization": "${parameters.org_id}"})
    model_id = client.model_for(connector)
    expect_error(client, "POST", f"{ML}/models/{model_id}/_predict", predict_body(), 400, "org_id")
    assert fake.stats.requests == []
    # filled by the request, the same model works
    client.ok("POST", f"{ML}/models/{model_id}/_predict",
              {"parameters": {"messages": SEED_MESSAGES, "org_id": "org-123"}})
    assert fake.stats.requests[-1].headers["openai-organization"] == "org-123"


# --- the server's own protocol errors ------------------------------------------------------

def test_garbage_request_line_is_400_json(server):
    response = raw_exchange(server.url, b"GARBAGE\r\n\r\n")
    assert_json_error(response.status, response.headers, response.body, 400)


def test_request_line_with_too_many_words_is_400_json(server):
    response = raw_exchange(server.url, b"GET / HTTP/1.1 extra words\r\nHost: x\r\n\r\n")
    assert_json_error(response.status, response.headers, response.body, 400)


def test_bad_http_version_is_400_json(server):
    response = raw_exchange(server.url, b"GET / HTTX/1.1\r\nHost: x\r\n\r\n")
    assert_json_error(response.status, response.headers, response.body, 400)


def test_http_2_request_line_is_505_json(server):
    response = raw_exchange(server.url, f"GET / HTTP/2.0\r\nHost: {host_header(server.url)}\r\n\r\n".encode())
    assert_json_error(response.status, response.headers, response.body, 505)


def test_header_line_longer_than_65536_bytes_is_431_json(server):
    head = (f"GET /healthz HTTP/1.1\r\nHost: {host_header(server.url)}\r\n"
            f"X-Huge: {'a' * 70_000}\r\n\r\n").encode()
    response = raw_exchange(server.url, head)
    assert_json_error(response.status, response.headers, response.body, 431)


def test_more_than_100_headers_is_431_json(server):
    lines = ["GET /healthz HTTP/1.1", f"Host: {host_header(server.url)}"]
    lines += [f"X-Header-{i}: {i}" for i in range(150)]
    response = raw_exchange(server.url, ("\r\n".join(lines) + "\r\n\r\n").encode())
    assert_json_error(response.status, response.headers, response.body, 431)


def test_invalid_content_length_is_400_json(server):
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host_header(server.url)}\r\n"
            "Content-Type: application/json\r\nContent-Length: ten\r\n\r\n").encode()
    response = raw_exchange(server.url, head)
    assert_json_error(response.status, response.headers, response.body, 400)


def test_malformed_chunked_body_is_400_json(server):
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host_header(server.url)}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            "zz\r\n{}\r\n0\r\n\r\n").encode()
    response = raw_exchange(server.url, head)
    assert_json_error(response.status, response.headers, response.body, 400)


def test_chunked_request_body_is_accepted(server, fake):
    body = json.dumps(openai_connector(fake)).encode()
    response = raw_request(server.url, "POST", f"{ML}/connectors/_create", body, chunked_request=True)
    assert response.status == 200, response.body
    connector_id = json.loads(response.body)["connector_id"]

    client = Client(server.url)
    model_id = client.register(connector_id)
    # the seed's curl sends the stream request with "Transfer-Encoding: chunked"
    response = raw_request(server.url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), chunked_request=True)
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.complete
    events = response.events()
    assert events[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True

    response = raw_request(server.url, "POST", f"{ML}/models/{model_id}/_predict",
                           json.dumps(predict_body()).encode(), chunked_request=True)
    assert response.status == 200
    assert json.loads(response.body)["inference_results"][0]["status_code"] == 200


def test_chunked_body_in_several_chunks_is_accepted(server, fake):
    body = json.dumps(openai_connector(fake)).encode()
    pieces = [body[i:i + 37] for i in range(0, len(body), 37)]
    payload = b"".join(b"%x\r\n%b\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host_header(server.url)}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    response = raw_exchange(server.url, head + payload)
    assert response.status == 200, response.body
    assert len(json.loads(response.body)["connector_id"]) == 20


def test_content_length_over_the_body_limit_is_413(make_server):
    server = make_server(max_body_bytes=1000)
    # the head alone: the server must answer from Content-Length, without waiting for the body
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host_header(server.url)}\r\n"
            "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n").encode()
    response = raw_exchange(server.url, head)
    assert_json_error(response.status, response.headers, response.body, 413)

    # a body within the limit is still served
    client = Client(server.url)
    status, headers, data = call(client, "GET", "/healthz")
    assert status == 200


def test_chunked_body_over_the_body_limit_is_413(make_server):
    server = make_server(max_body_bytes=1000)
    response = raw_request(server.url, "POST", f"{ML}/connectors/_create",
                           b'{"name": "' + b"x" * 2000 + b'"}', chunked_request=True)
    assert_json_error(response.status, response.headers, response.body, 413)


# --- credentials never leak into errors ------------------------------------------------------

def test_upstream_401_is_401_json_without_the_key(client, fake):
    connector = openai_connector(fake)
    connector["credential"] = {"openAI_key": WRONG_KEY}
    model_id = client.model_for(connector)

    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert_json_error(status, headers, data, 401)
    assert WRONG_KEY.encode() not in data
    assert WRONG_KEY[:8].encode() not in data

    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict/stream", stream_body())
    assert_json_error(status, headers, data, 401)
    assert WRONG_KEY.encode() not in data

    # the fake did get (and refuse) the wrong key: the 401 really came from upstream
    assert [r.headers["authorization"] for r in fake.stats.requests] == [f"Bearer {WRONG_KEY}"] * 2


def test_template_errors_never_contain_the_credential(client, fake):
    connector = openai_connector(fake)
    connector["credential"] = {"openAI_key": WRONG_KEY}
    # the key also goes into the body: a rendering error must not echo the rendered body
    connector["actions"][0]["request_body"] = (
        '{ "model": "${parameters.model}", "user": "${credential.openAI_key}", '
        '"messages": ${parameters.messages} }')
    model_id = client.model_for(connector)
    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict",
                                 {"parameters": {"messages": "[broken"}})
    assert_json_error(status, headers, data, 400)
    assert WRONG_KEY.encode() not in data
    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict", {"parameters": {}})
    assert_json_error(status, headers, data, 400, "messages")
    assert WRONG_KEY.encode() not in data
    assert fake.stats.requests == []


def test_upstream_error_status_is_passed_on_as_json(client, fake):
    model_id = client.model_for(openai_connector(fake, headers={"X-Fake-Status": "404"}))
    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert_json_error(status, headers, data, 404, "does not exist")
    model_id = client.model_for(openai_connector(fake, headers={"X-Fake-Status": "500"}))
    status, headers, data = call(client, "POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert_json_error(status, headers, data, 502)


# --- keep-alive ----------------------------------------------------------------------------

def test_two_requests_on_one_keep_alive_connection(server, fake):
    host, port = host_header(server.url).split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_GUARD)
    try:
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        assert first.status == 200 and json.loads(first.read()) == {"status": "ok"}
        assert first.getheader("Connection", "").lower() != "close"
        sock = connection.sock

        body = json.dumps(openai_connector(fake))
        connection.request("POST", f"{ML}/connectors/_create", body=body,
                           headers={"Content-Type": "application/json"})
        second = connection.getresponse()
        assert second.status == 200
        assert len(json.loads(second.read())["connector_id"]) == 20
        assert connection.sock is sock  # same socket: no reconnect happened

        # an error answer does not break the connection either
        connection.request("GET", "/no/such/route")
        third = connection.getresponse()
        assert third.status == 404 and json.loads(third.read())["status"] == 404
        connection.request("GET", "/")
        fourth = connection.getresponse()
        assert fourth.status == 200 and json.loads(fourth.read())["name"] == "mlstream"
        assert connection.sock is sock
    finally:
        connection.close()


@pytest.mark.parametrize("method, path, status", [
    ("POST", "/no/such/route", 404),
    ("POST", "/_cluster/settings", 405),
])
def test_an_error_before_the_body_is_read_does_not_break_keep_alive(server, method, path, status):
    """A routing error must still consume (or close the connection on) the request body."""
    host, port = host_header(server.url).split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_GUARD)
    try:
        connection.request(method, path, body=json.dumps({"name": "x" * 100}),
                           headers={"Content-Type": "application/json"})
        first = connection.getresponse()
        assert first.status == status and json.loads(first.read())["status"] == status
        # http.client reconnects by itself if the server said "Connection: close"
        connection.request("GET", "/healthz")
        second = connection.getresponse()
        assert second.status == 200, second.read()
        assert json.loads(second.read()) == {"status": "ok"}
    finally:
        connection.close()
