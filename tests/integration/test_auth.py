"""API keys and roles, as a user meets them: keys made by the real `mlstream keys`
command in another process, a running server that picks them up on its next request.

Keys are created, listed and revoked through `python -m mlstream keys ... --data-dir D`
(subprocesses); the server under test is in-process (``make_server``) on the same
data directory, or a real `mlstream serve` subprocess where start-up behaviour is the
point (the warning, the refusal to serve a non-loopback address without keys).
"""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..support.clients import Client, assert_401, bearer, client_with
from ..support.connectors import openai_connector
from ..support.servers import MLSTREAM, clean_env, create_key, keys_cli, loopback_url, start_serve, stop_serve
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request, read_response

ML = "/_plugins/_ml"


# --- helpers ---------------------------------------------------------------------------

def list_keys(data_dir: Path) -> tuple[str, list[list[str]]]:
    """(raw stdout, rows of [id, role, name, tenant, limits...]) of `mlstream keys list`."""
    result = keys_cli(data_dir, "list")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    return result.stdout, rows


def key_id(data_dir: Path, name: str) -> str:
    _, rows = list_keys(data_dir)
    ids = [row[0] for row in rows if len(row) >= 3 and row[2] == name]
    assert len(ids) == 1, rows
    return ids[0]


def revoke(data_dir: Path, name: str) -> None:
    result = keys_cli(data_dir, "revoke", key_id(data_dir, name))
    assert result.returncode == 0, result.stderr


def basic(name: str, key: str) -> dict[str, str]:
    """What `curl -u name:KEY` sends."""
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{key}".encode()).decode()}


def assert_403(reply: Any, key: str) -> None:
    assert reply.status == 403, (reply.status, reply.body)
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    assert reply.body["status"] == 403 and reply.body["error"]["type"] == "security_exception", reply.body
    assert key not in json.dumps(reply.body)


def predict_body() -> dict[str, Any]:
    return {"parameters": {"messages": SEED_MESSAGES}}


def stream_events_ok(url: str, model_id: str, headers: dict[str, str]) -> list[dict]:
    response = raw_request(url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers=headers)
    assert response.status == 200, response.body
    assert response.complete
    events = response.events()
    assert events[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
    return events


# --- a server with an admin and a user key ------------------------------------------------

@dataclass
class Secured:
    url: str
    data_dir: Path
    admin_key: str
    user_key: str
    admin: Client
    user: Client
    anonymous: Client
    connector_id: str
    model_id: str


@pytest.fixture
def secured(make_server, tmp_path, fake) -> Secured:
    server = make_server()
    data_dir = tmp_path / "data"
    open_client = Client(server.url)
    connector_id = open_client.create_connector(openai_connector(fake))
    model_id = open_client.register(connector_id)
    admin_key = create_key(data_dir, "admin", "ops")
    user_key = create_key(data_dir, "user", "app")
    return Secured(server.url, data_dir, admin_key, user_key, client_with(server.url, bearer(admin_key)),
                   client_with(server.url, bearer(user_key)), Client(server.url), connector_id, model_id)


# --- the keys command ---------------------------------------------------------------------

def test_keys_create_list_and_revoke(tmp_path):
    data_dir = tmp_path / "data"
    ops = create_key(data_dir, "admin", "ops")
    app = create_key(data_dir, "user", "app")
    assert ops != app

    stdout, rows = list_keys(data_dir)
    assert ops not in stdout and app not in stdout
    assert ops[4:] not in stdout and app[4:] not in stdout  # not even without a prefix
    assert sorted((row[1], row[2]) for row in rows) == [("admin", "ops"), ("user", "app")], stdout
    assert len({row[0] for row in rows}) == 2

    ops_id = key_id(data_dir, "ops")
    result = keys_cli(data_dir, "revoke", ops_id)
    assert result.returncode == 0, result.stderr
    assert ops not in result.stdout + result.stderr
    _, rows = list_keys(data_dir)
    assert [(row[1], row[2]) for row in rows] == [("user", "app")]

    # revoking it again, or an id that never existed: a clear error, no traceback
    for missing in (ops_id, "nosuchid"):
        result = keys_cli(data_dir, "revoke", missing)
        assert result.returncode != 0
        assert missing in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_keys_create_refuses_an_unknown_role(tmp_path):
    result = keys_cli(tmp_path / "data", "create", "--role", "root")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "role" in result.stderr
    assert list_keys(tmp_path / "data")[1] == []


def test_keys_are_stored_hashed_not_in_the_store_or_its_wal(make_server, tmp_path):
    server = make_server()  # keeps the database open, so the WAL stays as it is
    data_dir = tmp_path / "data"
    key = create_key(data_dir, "admin", "ops")
    assert client_with(server.url, bearer(key)).call("GET", "/").status == 200  # the server knows it

    db, wal = data_dir / "mlstream.db", data_dir / "mlstream.db-wal"
    assert db.exists() and wal.exists() and wal.stat().st_size > 0
    for path in sorted(data_dir.iterdir()):
        if path.is_file():
            raw = path.read_bytes()
            assert key.encode() not in raw, path
            assert key[4:].encode() not in raw, path


# --- no keys, then keys -------------------------------------------------------------------

def test_open_without_keys_then_a_key_made_by_the_cli_locks_the_server_at_once(make_server, tmp_path, fake):
    server = make_server()
    anonymous = Client(server.url)
    assert anonymous.call("GET", "/").status == 200
    connector_id = anonymous.create_connector(openai_connector(fake))

    key = create_key(tmp_path / "data", "admin", "ops")
    # no restart, no wait: the very next request
    assert_401(anonymous.call("GET", "/"))
    assert_401(anonymous.call("GET", f"{ML}/connectors/{connector_id}"))

    assert client_with(server.url, bearer(key)).call("GET", "/").status == 200
    assert client_with(server.url, basic("ops", key)).call("GET", "/").status == 200
    assert client_with(server.url, bearer(key)).ok("GET", f"{ML}/connectors/{connector_id}")["name"]


def test_basic_and_bearer_forms(secured):
    url, key = secured.url, secured.admin_key
    # curl -u name:KEY: the user name is not checked, the password is the key
    for headers in (basic("ops", key), basic("anyone", key), bearer(key),
                    {"Authorization": f"bearer {key}"}, {"Authorization": f"BEARER   {key}"}):
        assert client_with(url, headers).call("GET", "/").status == 200, headers

    refused = [
        basic(key, ""),                                  # the key as the user name
        basic("ops", ""),                                # no password
        {"Authorization": "Basic !!!not-base64!!!"},     # malformed: a 401, never a 500
        {"Authorization": "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode()},
        {"Authorization": f"Token {key}"},               # an unknown scheme
        {"Authorization": key},                          # no scheme
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
    ]
    for headers in refused:
        assert_401(client_with(url, headers).call("GET", "/"), presented=key)


# --- roles ------------------------------------------------------------------------------

def test_user_role_may_predict_stream_and_read_models(secured):
    user, model_id = secured.user, secured.model_id
    result = user.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())
    assert result["inference_results"][0]["status_code"] == 200
    stream_events_ok(secured.url, model_id, bearer(secured.user_key))
    stream_events_ok(secured.url, model_id, basic("app", secured.user_key))
    assert user.ok("GET", f"{ML}/models/{model_id}")["name"]
    hits = user.ok("POST", f"{ML}/models/_search", {"query": {"match_all": {}}})["hits"]
    assert hits["total"]["value"] == 1
    assert user.ok("GET", f"{ML}/models/_search")["hits"]["total"]["value"] == 1
    assert user.ok("GET", "/")["name"] == "mlstream"
    assert user.call("GET", "/metrics").status == 200


ADMIN_ONLY = [
    ("POST", f"{ML}/connectors/_create", "connector"),
    ("GET", f"{ML}/connectors/{{connector_id}}", None),
    ("PUT", f"{ML}/connectors/{{connector_id}}", {"description": "changed by a user"}),
    ("DELETE", f"{ML}/connectors/{{connector_id}}", None),
    ("POST", f"{ML}/connectors/_search", {"query": {"match_all": {}}}),
    ("POST", f"{ML}/models/_register?deploy=true", "model"),
    ("DELETE", f"{ML}/models/{{model_id}}", None),
    ("POST", f"{ML}/models/{{model_id}}/_undeploy", None),
    ("POST", f"{ML}/models/{{model_id}}/_deploy", None),
    ("GET", "/_cluster/settings", None),
    ("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.stream_enabled": False}}),
]


@pytest.mark.parametrize("method, template, body", ADMIN_ONLY,
                         ids=[f"{m} {t}" for m, t, _ in ADMIN_ONLY])
def test_user_role_is_forbidden_everything_else(secured, fake, method, template, body):
    path = template.format(connector_id=secured.connector_id, model_id=secured.model_id)
    if body == "connector":
        body = openai_connector(fake)
    elif body == "model":
        body = {"name": "m", "function_name": "remote", "connector_id": secured.connector_id}
    before_connectors = secured.admin.ok("POST", f"{ML}/connectors/_search", {})
    before_models = secured.admin.ok("POST", f"{ML}/models/_search", {})
    before_settings = secured.admin.ok("GET", "/_cluster/settings")

    assert_403(secured.user.call(method, path, body), secured.user_key)
    # and without any key it is a 401, not a 403
    assert_401(secured.anonymous.call(method, path, body))

    # nothing changed
    assert secured.admin.ok("POST", f"{ML}/connectors/_search", {}) == before_connectors
    assert secured.admin.ok("POST", f"{ML}/models/_search", {}) == before_models
    assert secured.admin.ok("GET", "/_cluster/settings") == before_settings


def test_admin_role_may_do_everything(secured, fake):
    admin = secured.admin
    connector_id = admin.create_connector(openai_connector(fake))
    assert admin.ok("GET", f"{ML}/connectors/{connector_id}")["name"]
    admin.ok("PUT", f"{ML}/connectors/{connector_id}", {"description": "changed"})
    assert admin.ok("POST", f"{ML}/connectors/_search", {})["hits"]["total"]["value"] == 2
    registered = admin.ok("POST", f"{ML}/models/_register", {
        "name": "m", "function_name": "remote", "connector_id": connector_id})
    model_id = registered["model_id"]
    assert admin.ok("GET", f"{ML}/tasks/{registered['task_id']}")["state"] == "COMPLETED"
    admin.ok("POST", f"{ML}/models/{model_id}/_deploy")
    assert admin.ok("POST", f"{ML}/models/{model_id}/_predict", predict_body())["inference_results"]
    stream_events_ok(secured.url, model_id, bearer(secured.admin_key))
    assert admin.ok("GET", f"{ML}/models/{model_id}")["model_state"] == "DEPLOYED"
    admin.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.stream_enabled": True}})
    assert admin.ok("GET", "/_cluster/settings")["persistent"]
    assert admin.call("GET", "/metrics").status == 200
    admin.ok("POST", f"{ML}/models/{model_id}/_undeploy")
    admin.ok("DELETE", f"{ML}/models/{model_id}")
    admin.ok("DELETE", f"{ML}/connectors/{connector_id}")


def test_health_and_readiness_are_open_and_metrics_needs_a_key(secured):
    assert secured.anonymous.ok("GET", "/healthz") == {"status": "ok"}
    assert secured.anonymous.ok("GET", "/readyz")["status"] == "ready"
    # a wrong key does not close the open routes either
    wrong = client_with(secured.url, bearer("mls_" + secrets.token_urlsafe(32)))
    assert wrong.call("GET", "/healthz").status == 200
    assert_401(secured.anonymous.call("GET", "/metrics"))
    assert_401(wrong.call("GET", "/metrics"))
    metrics = secured.user.call("GET", "/metrics")
    assert metrics.status == 200 and "mlstream_" in metrics.body


def test_missing_and_wrong_keys_get_the_same_401_with_no_hint(secured):
    real = secured.admin_key
    near_miss = real[:-1] + ("A" if real[-1] != "A" else "B")
    revoked = create_key(secured.data_dir, "admin", "short-lived")
    assert client_with(secured.url, bearer(revoked)).call("GET", "/").status == 200
    revoke(secured.data_dir, "short-lived")

    missing = assert_401(secured.anonymous.call("GET", "/"))
    wrong_bodies = {}
    for label, presented in [("random", "mls_" + secrets.token_urlsafe(32)), ("near miss", near_miss),
                             ("revoked", revoked), ("key id", key_id(secured.data_dir, "ops")),
                             ("user key hash", "0" * 64)]:
        reply = client_with(secured.url, bearer(presented)).call("GET", "/")
        body = assert_401(reply, presented=presented)
        assert reply.headers["WWW-Authenticate"] == secured.anonymous.call("GET", "/").headers["WWW-Authenticate"]
        wrong_bodies[label] = body
        # the same through Basic auth
        assert client_with(secured.url, basic("ops", presented)).call("GET", "/").body == body

    # every wrong key gets exactly the same answer: nothing tells a near miss or a revoked
    # key from a random one
    assert len({json.dumps(body, sort_keys=True) for body in wrong_bodies.values()}) == 1, wrong_bodies
    # a missing key has the same shape (only the reason may say that nothing was sent)
    wrong = next(iter(wrong_bodies.values()))
    assert set(missing) == set(wrong) and set(missing["error"]) == set(wrong["error"])
    assert missing["error"]["type"] == wrong["error"]["type"] and missing["status"] == wrong["status"]


def test_a_scripts_401_offers_no_basic_challenge_and_every_other_client_keeps_it(secured):
    """A browser answers a Basic challenge with its password dialog; the console (and any
    script that says X-Requested-With: XMLHttpRequest) must get its 401 without one, while
    clients that send credentials only once challenged by Basic keep getting it."""
    script = {"X-Requested-With": "XMLHttpRequest"}
    for label, headers in [("nothing", {}), ("wrong bearer", bearer("mls_" + secrets.token_urlsafe(32))),
                           ("wrong basic", basic("ops", "mls_" + secrets.token_urlsafe(32)))]:
        plain = client_with(secured.url, headers).call("GET", "/")
        assert_401(plain)
        assert plain.headers["WWW-Authenticate"] == 'Basic realm="mlstream", Bearer realm="mlstream"', label
        scripted = client_with(secured.url, {**headers, **script}).call("GET", "/")
        assert_401(scripted)
        assert scripted.headers["WWW-Authenticate"] == 'Bearer realm="mlstream"', label
        assert scripted.body == plain.body, label  # nothing else differs
    # the marker changes nothing for a good key
    assert client_with(secured.url, {**bearer(secured.admin_key), **script}).call("GET", "/").status == 200
    assert client_with(secured.url, {**basic("ops", secured.user_key), **script}).call("GET", "/").status == 200


def test_a_revoked_key_is_refused_at_once_even_on_an_open_connection(secured):
    key = create_key(secured.data_dir, "user", "doomed")
    host, port = secured.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_GUARD)
    try:
        connection.request("GET", "/", headers=bearer(key))
        first = connection.getresponse()
        assert first.status == 200, first.read()
        first.read()
        sock = connection.sock

        revoke(secured.data_dir, "doomed")
        connection.request("GET", "/", headers=bearer(key))
        second = connection.getresponse()
        body = json.loads(second.read())
        assert second.status == 401 and body["status"] == 401, body
        assert connection.sock is sock  # the same keep-alive connection
    finally:
        connection.close()
    # the other keys still work
    assert secured.user.call("GET", "/").status == 200


def test_a_refused_request_with_a_body_does_not_poison_the_connection(secured):
    # The refused request's body is itself a complete HTTP request: if the server took the
    # unread body for the next request on the connection, it would answer it.
    host, port = secured.url.removeprefix("http://").split(":")
    smuggled = (f"DELETE {ML}/models/{secured.model_id} HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {secured.admin_key}\r\n\r\n").encode()
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(smuggled)}\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        sock.sendall(head + smuggled)
        reader = sock.makefile("rb")
        first = read_response(reader)
        assert first.status == 401, first.body
        rest = reader.read()  # up to the server's close (header timeout at the latest)
    assert b"HTTP/1.1" not in rest, rest[:300]
    assert secured.admin.ok("GET", f"{ML}/models/{secured.model_id}")["name"]  # not deleted

    # a client that keeps using its connection object: the next, authorised, request works
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_GUARD)
    try:
        for _ in range(2):
            connection.request("POST", f"{ML}/connectors/_create", body=json.dumps({"name": "x" * 500}),
                               headers={"Content-Type": "application/json"})
            refused = connection.getresponse()
            assert refused.status == 401 and json.loads(refused.read())["status"] == 401
            connection.request("GET", "/", headers=bearer(secured.user_key))
            ok = connection.getresponse()
            assert ok.status == 200 and json.loads(ok.read())["name"] == "mlstream"
    finally:
        connection.close()


def test_a_refusal_does_not_wait_for_a_body_that_never_comes(secured):
    host, port = secured.url.removeprefix("http://").split(":")
    head = (f"POST {ML}/connectors/_create HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n").encode()
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        sock.sendall(head)  # and never the body
        response = read_response(sock.makefile("rb"))
    assert response.status == 401, response.body
    assert time.monotonic() - started < HANG_GUARD / 2


def test_keys_never_reach_the_log(secured, caplog):
    caplog.set_level("DEBUG")
    secured.user.ok("POST", f"{ML}/models/{secured.model_id}/_predict", predict_body())
    secured.user.call("PUT", "/_cluster/settings", {"persistent": {}})
    client_with(secured.url, bearer(secured.admin_key + "x")).call("GET", "/")
    client_with(secured.url, basic("ops", secured.admin_key)).call("GET", "/")
    text = caplog.text + "".join(str(record.__dict__) for record in caplog.records)
    for key in (secured.admin_key, secured.user_key):
        assert key not in text and key[4:] not in text


# --- `mlstream serve` start-up ------------------------------------------------------------

def test_serve_on_loopback_without_keys_is_open_with_a_warning_then_locked_by_a_new_key(tmp_path):
    data_dir = tmp_path / "data"
    process, url = start_serve(data_dir)
    try:
        anonymous = Client(url)
        assert anonymous.call("GET", "/").status == 200
        key = create_key(data_dir, "admin", "ops")
        assert_401(anonymous.call("GET", "/"))
        assert client_with(url, bearer(key)).call("GET", "/").status == 200
        assert client_with(url, basic("ops", key)).call("GET", "/").status == 200
        assert anonymous.call("GET", "/healthz").status == 200
    finally:
        stderr = stop_serve(process)
    warnings = [line for line in stderr.splitlines() if "WARNING" in line and "key" in line.lower()]
    assert warnings, stderr
    assert key not in stderr and "Traceback" not in stderr


def test_serve_on_a_public_address_without_keys_refuses_to_start(tmp_path):
    result = subprocess.run([*MLSTREAM, "serve", "--host", "0.0.0.0", "--port", "0", "--data-dir",
                             str(tmp_path / "data")], capture_output=True, text=True, timeout=HANG_GUARD,
                            env=clean_env())
    assert result.returncode != 0, result
    assert "--insecure-no-auth" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "listening" not in result.stdout


def test_serve_on_a_public_address_starts_with_insecure_no_auth(tmp_path):
    process, url = start_serve(tmp_path / "data", "--host", "0.0.0.0", "--insecure-no-auth")
    try:
        assert url.startswith("http://0.0.0.0:")
        assert Client(loopback_url(url)).call("GET", "/").status == 200  # open, as asked
    finally:
        stderr = stop_serve(process)
    assert "WARNING" in stderr and "Traceback" not in stderr


def test_serve_on_a_public_address_with_a_key_starts_and_is_locked(tmp_path):
    key = create_key(tmp_path / "data", "user", "app")
    process, url = start_serve(tmp_path / "data", "--host", "0.0.0.0")
    try:
        local = loopback_url(url)
        assert_401(Client(local).call("GET", "/"))
        assert client_with(local, bearer(key)).call("GET", "/").status == 200
    finally:
        stderr = stop_serve(process)
    assert key not in stderr and "Traceback" not in stderr
