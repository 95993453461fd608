"""Outbound connections can't be turned on us (SSRF).

The server under test trusts every http(s) URL (``trusted_endpoints=(r"^https?://.*$",)``)
so that only the private-address guard stands between a connector and an internal
address. DNS is simulated by wrapping ``socket.getaddrinfo`` for one made-up name: that
stands in for a resolver, not for any mlstream class. Everything listens on loopback.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest

from mlstream.testing.fake_openai import FakeOpenAI, fake_tokens, Scenario

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.wire import raw_request

ML = "/_plugins/_ml"
ANY_HTTP = r"^https?://.*$"
PUBLIC_ADDRESS = "93.184.216.34"  # a public (global) address; never actually reached, see the rebinding test
FULL_ANSWER = "".join(fake_tokens(Scenario()))

REFUSED_HOSTS = [
    "http://127.0.0.1/",
    "http://2130706433/",            # 127.0.0.1, decimal
    "http://0x7f000001/",            # hex
    "http://0177.0.0.1/",            # octal first part
    "http://127.1/",                 # short form
    "http://0.0.0.0/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",    # IPv4-mapped loopback
    "http://169.254.169.254/latest/meta-data",
    "http://10.1.2.3/",
    "http://192.168.0.1/",
    "http://localhost/",
    "http://foo.localhost/",
    # more spellings and neighbours of the same
    "http://127.0.0.1:8080/v1/chat/completions",
    "https://127.0.0.1/v1/chat/completions",
    "http://127.000.000.001/",
    "http://0x7f.1/",
    "http://017700000001/",
    "http://0/",
    "http://2852039166/latest/meta-data",   # 169.254.169.254, decimal
    "http://0xa9fea9fe/latest/meta-data",   # 169.254.169.254, hex
    "http://172.16.0.1/",
    "http://[::]/",
    "http://[0:0:0:0:0:ffff:7f00:1]/",
    "http://[::127.0.0.1]/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/latest/meta-data",  # the AWS metadata service over IPv6
    "http://100.100.100.200/latest/meta-data",  # the Alibaba Cloud metadata service (RFC 6598 space)
    "http://LOCALHOST./",
    "http://localhost.localdomain/",
    "http://api.example.com@127.0.0.1/",       # userinfo that looks like a host
    "http://127.0.0.1#@api.example.com/",
]
OTHER_SCHEMES = ["ftp://api.example.com/v1/chat/completions", "file:///etc/passwd",
                 "gopher://api.example.com:6379/_INFO", "ws://api.example.com/v1"]


def connector_to(url: str, **parameters: Any) -> dict[str, Any]:
    return {
        "name": "probe", "protocol": "http",
        "parameters": {"model": "gpt-3.5-turbo", **parameters},
        "credential": {"openAI_key": "sk-ssrf-probe"},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": url,
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }


def predict_body(**parameters: Any) -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES, **parameters}}


def assert_refused(reply: Any, *words: str) -> None:
    assert reply.status == 400, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    assert isinstance(reply.body, dict) and reply.body["status"] == 400, reply.body
    reason = reply.body["error"]["reason"]
    assert any(word.lower() in reason.lower() for word in words), (words, reason)


def count(client: Client, kind: str) -> int:
    return client.ok("POST", f"{ML}/{kind}/_search", {})["hits"]["total"]["value"]


def addrinfo(address: str, port: int) -> tuple:
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))


class Resolver:
    """Wraps socket.getaddrinfo: ``name`` gets the answers ``answer(n)`` gives for its n-th
    lookup (0-based); ``routes`` stand in for the network path to an address; everything
    else is looked up as usual."""

    def __init__(self, monkeypatch, name: str, answer: Callable[[int], list[str]],
                 routes: dict[str, str] | None = None) -> None:
        self.name, self.answer, self.routes = name, answer, routes or {}
        self.lookups: list[str] = []
        self._lock = threading.Lock()
        self._real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", self)

    def __call__(self, host, port, *args, **kwargs):
        text = host.decode() if isinstance(host, bytes) else str(host)
        if text.rstrip(".").lower() == self.name:
            with self._lock:
                n = len(self.lookups)
                self.lookups.append(text)
            return [addrinfo(address, int(port)) for address in self.answer(n)]
        if text in self.routes:
            return self._real(self.routes[text], port, *args, **kwargs)
        return self._real(host, port, *args, **kwargs)


@pytest.fixture
def guarded(make_server) -> Client:
    """Every http(s) URL trusted; private endpoints not allowed (the default)."""
    return Client(make_server(trusted_endpoints=(ANY_HTTP,), allow_private_endpoints=False).url)


# --- create time ------------------------------------------------------------------------

@pytest.mark.parametrize("url", REFUSED_HOSTS)
def test_a_private_or_local_host_is_refused_at_create(guarded, url):
    if not url.rstrip("/").endswith(("completions", "meta-data", "v1")):
        url = url + "v1/chat/completions" if url.endswith("/") else url
    assert_refused(guarded.call("POST", f"{ML}/connectors/_create", connector_to(url)), "private")
    # the same host through an inline connector, and through an update
    assert_refused(guarded.call("POST", f"{ML}/models/_register", {
        "name": "m", "function_name": "remote", "connector": connector_to(url)}), "private")
    connector_id = guarded.create_connector(connector_to("https://api.example.com/v1/chat/completions"))
    before = guarded.ok("GET", f"{ML}/connectors/{connector_id}")
    reply = guarded.call("PUT", f"{ML}/connectors/{connector_id}", {"actions": connector_to(url)["actions"]})
    assert_refused(reply, "private")
    assert guarded.ok("GET", f"{ML}/connectors/{connector_id}") == before
    assert count(guarded, "connectors") == 1 and count(guarded, "models") == 0


@pytest.mark.parametrize("url", OTHER_SCHEMES)
def test_only_http_and_https_are_allowed(guarded, make_server, url):
    assert_refused(guarded.call("POST", f"{ML}/connectors/_create", connector_to(url)), "http", "trusted")
    # even when every URL is trusted and private endpoints are allowed, the scheme is checked
    lenient = Client(make_server(trusted_endpoints=(r"^.*$",), allow_private_endpoints=True).url)
    assert_refused(lenient.call("POST", f"{ML}/connectors/_create", connector_to(url)), "http or https")
    assert count(guarded, "connectors") == 0 and count(lenient, "connectors") == 0


def test_a_public_host_name_is_accepted_at_create_without_dns(guarded, monkeypatch):
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def recording(host, *args, **kwargs):
        looked_up.append(str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    for url in ("https://api.example.com/v1/chat/completions", "http://api.example.com:8080/v1/chat/completions",
                "https://${parameters.endpoint}/v1/chat/completions", f"http://{PUBLIC_ADDRESS}/v1/chat/completions"):
        guarded.create_connector(connector_to(url, endpoint="llm.example.org"))
    assert not [host for host in looked_up if "example" in host or host == PUBLIC_ADDRESS], looked_up
    assert count(guarded, "connectors") == 4


# --- call time --------------------------------------------------------------------------

@pytest.mark.parametrize("answers", [
    ["127.0.0.1"],
    ["::ffff:127.0.0.1"],
    ["::1"],
    [PUBLIC_ADDRESS, "127.0.0.1"],   # one public and one private answer: still refused
])
def test_a_name_resolving_to_a_private_address_is_refused_at_call_time(guarded, fake, monkeypatch, answers):
    resolver = Resolver(monkeypatch, "internal.example.test", lambda n: answers)
    connector = openai_connector(fake)
    connector["parameters"]["endpoint"] = f"internal.example.test:{fake.port}"
    model_id = guarded.model_for(connector)
    assert resolver.lookups == []  # nothing resolved at create

    assert_refused(guarded.call("POST", f"{ML}/models/{model_id}/_predict", predict_body()), "private")
    stream = raw_request(guarded.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                         json.dumps(stream_body()).encode())
    assert stream.status == 400, stream.body
    assert "private" in json.loads(stream.body)["error"]["reason"]
    assert resolver.lookups  # it was resolved at call time
    assert fake.stats.requests == []


def test_a_request_parameter_cannot_point_the_url_at_a_private_host(guarded, fake):
    model_id = guarded.model_for(connector_to("http://${parameters.endpoint}/v1/chat/completions",
                                              endpoint="api.example.com"))
    for endpoint in (f"127.0.0.1:{fake.port}", f"2130706433:{fake.port}", f"localhost:{fake.port}",
                     f"[::ffff:127.0.0.1]:{fake.port}"):
        assert_refused(guarded.call("POST", f"{ML}/models/{model_id}/_predict", predict_body(endpoint=endpoint)),
                       "private")
        stream = raw_request(guarded.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                             json.dumps(stream_body(endpoint=endpoint)).encode())
        assert stream.status == 400, stream.body
    assert fake.stats.requests == []


@pytest.fixture
def public_stand_in(fake) -> Iterator[FakeOpenAI]:
    """The provider at the "public" address: in this sandbox it listens on 127.0.0.2,
    on the same port as the fake on 127.0.0.1 (the address a rebinding attack aims at)."""
    with FakeOpenAI(host="127.0.0.2", port=fake.port) as provider:
        yield provider


def test_dns_rebinding_cannot_reach_loopback(guarded, fake, public_stand_in, monkeypatch):
    # The first lookup answers a public address; every later one, 127.0.0.1. A guard that
    # checks one lookup and lets the connection do another would connect to 127.0.0.1.
    resolver = Resolver(monkeypatch, "rebind.example.test",
                        lambda n: [PUBLIC_ADDRESS] if n == 0 else ["127.0.0.1"],
                        routes={PUBLIC_ADDRESS: "127.0.0.2"})
    connector = openai_connector(fake)
    connector["parameters"]["endpoint"] = f"rebind.example.test:{fake.port}"
    model_id = guarded.model_for(connector)

    result = guarded.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert result.status == 200, result.body
    assert len(resolver.lookups) == 1          # resolved once ...
    assert len(public_stand_in.stats.requests) == 1  # ... and connected to what was checked
    assert fake.stats.requests == []

    # later calls: a pooled connection to the checked address, or a fresh lookup (now
    # 127.0.0.1) that is refused -- never a connection to 127.0.0.1
    for _ in range(3):
        reply = guarded.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
        assert reply.status in (200, 400), reply.body
        stream = raw_request(guarded.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                             json.dumps(stream_body()).encode())
        assert stream.status in (200, 400), stream.body
    assert fake.stats.requests == []
    assert fake.stats.connections_closed == 0 and fake.stats.connections_open == 0


def test_dns_rebinding_on_the_stream_route(guarded, fake, public_stand_in, monkeypatch):
    resolver = Resolver(monkeypatch, "rebind.example.test",
                        lambda n: [PUBLIC_ADDRESS] if n == 0 else ["127.0.0.1"],
                        routes={PUBLIC_ADDRESS: "127.0.0.2"})
    connector = openai_connector(fake)
    connector["parameters"]["endpoint"] = f"rebind.example.test:{fake.port}"
    model_id = guarded.model_for(connector)
    stream = raw_request(guarded.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                         json.dumps(stream_body()).encode())
    assert stream.status == 200, stream.body
    events = stream.events()
    text = "".join(e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events)
    assert text == FULL_ANSWER
    assert len(resolver.lookups) == 1
    assert len(public_stand_in.stats.requests) == 1 and fake.stats.requests == []


# --- redirects --------------------------------------------------------------------------

class Redirector:
    """A provider that answers every call with a redirect to ``location``."""

    def __init__(self, status: int, location: str) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.calls += 1
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.calls = 0
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()
        self.port = self.http.server_address[1]

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_not_followed(make_server, fake, status):
    # loopback is allowed here: the point is that no redirect is followed at all
    client = Client(make_server().url)
    redirector = Redirector(status, f"{fake.url}/v1/chat/completions")
    try:
        connector = openai_connector(fake)
        connector["parameters"]["endpoint"] = f"127.0.0.1:{redirector.port}"
        model_id = client.model_for(connector)
        reply = client.call("POST", f"{ML}/models/{model_id}/_predict", predict_body())
        stream = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                             json.dumps(stream_body()).encode())
    finally:
        redirector.close()
    assert reply.status == 502, reply.body
    assert reply.headers["Content-Type"].startswith("application/json")
    assert str(status) in reply.body["error"]["reason"], reply.body
    assert stream.status == 502, stream.body
    assert str(status) in json.loads(stream.body)["error"]["reason"]
    assert redirector.calls == 2          # one call each, no retry
    assert fake.stats.requests == []      # the redirect target saw nothing
