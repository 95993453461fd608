"""The state with no API key while the server runs (see ``mlstream.access.keys``'s docstring).

A server that has had a key, or was told to refuse without one, stays locked when the
last key is revoked (401 naming the way out); a loopback server that never had a key
stays open. Keys are created and revoked through ``KeyStore`` on the server's data
directory from another store connection, as ``mlstream keys`` does from another
process. The last tests check that the key reload does its store I/O outside the lock
every request takes, and that a stale reload never overwrites a newer one.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from mlstream.access.keys import Authenticator, KeyStore, hash_key
from mlstream.errors import Unauthorized
from mlstream.store.sqlite import Record, SQLiteStore

from ..support.clients import Client, assert_401, bearer, client_with
from ..support.connectors import openai_connector
from ..support.servers import loopback_url, start_serve, stop_serve
from ..support.streams import stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request

ML = "/_plugins/_ml"
AUTH_LOGGER = "mlstream.access.keys"


class Keys:
    """``mlstream keys`` for the server's data directory, through its own store connection."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def create(self, role: str = "admin", name: str = "ops") -> tuple[str, str]:
        store = SQLiteStore(self.data_dir)
        try:
            key, secret = KeyStore(store).create(role, name)
        finally:
            store.close()
        return key.key_id, secret

    def revoke(self, key_id: str) -> None:
        store = SQLiteStore(self.data_dir)
        try:
            assert KeyStore(store).revoke(key_id)
        finally:
            store.close()


def assert_no_key_401(reply: Any) -> None:
    body = assert_401(reply)
    reason = body["error"]["reason"]
    assert "no API key exists" in reason and "mlstream keys create" in reason, reason


def auth_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == AUTH_LOGGER and r.levelno == level]


# --- a loopback server that never had a key: open, as the demo and README rely on ---------

def test_loopback_server_that_never_had_a_key_stays_open(make_server, fake, caplog):
    caplog.set_level(logging.INFO, logger=AUTH_LOGGER)
    server = make_server()
    anonymous = Client(server.url)
    assert anonymous.ok("GET", "/")["name"] == "mlstream"
    model_id = anonymous.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert response.status == 200 and response.complete
    assert not auth_records(caplog, logging.WARNING)


# --- a server that had keys: losing the last one locks it -----------------------------------

def test_revoking_the_last_key_locks_the_server_until_a_key_exists_again(make_server, fake, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=AUTH_LOGGER)
    server = make_server()
    keys = Keys(tmp_path / "data")
    anonymous = Client(server.url)
    model_id = anonymous.model_for(openai_connector(fake))  # set up while open

    key_id, secret = keys.create("admin", "ops")
    admin = client_with(server.url, bearer(secret))
    assert admin.ok("GET", "/")["name"] == "mlstream"
    assert_401(anonymous.call("GET", "/"))

    keys.revoke(key_id)
    # not open: every authenticated route refuses, with a reason naming the way out
    assert_no_key_401(anonymous.call("GET", "/"))
    assert_no_key_401(anonymous.call("GET", f"{ML}/models/{model_id}"))
    assert_no_key_401(anonymous.call("POST", f"{ML}/connectors/_create", openai_connector(fake)))
    assert_no_key_401(admin.call("GET", "/"))  # the revoked key too
    stream = raw_request(server.url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                         json.dumps(stream_body()).encode())
    assert stream.status == 401 and json.loads(stream.body)["status"] == 401
    assert fake.stats.requests == []  # nothing reached the provider
    assert anonymous.ok("GET", "/healthz") == {"status": "ok"}  # public routes stay public
    # the only connector is the one made while the server was open
    assert json.loads(raw_request(server.url, "POST", f"{ML}/connectors/_search", b"{}",
                                  headers=bearer(keys.create("admin", "check")[1])).body
                      )["hits"]["total"]["value"] == 1

    warnings = auth_records(caplog, logging.WARNING)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once, not per request
    assert "mlstream keys create" in warnings[0].getMessage()
    # an info line when the first key locked the open server, and when keys came back
    infos = [r.getMessage() for r in auth_records(caplog, logging.INFO)]
    assert len(infos) == 2 and "exist now" in infos[0] and "exist again" in infos[1], infos


def test_a_new_key_after_the_lock_works_and_the_lock_returns_with_its_revocation(make_server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=AUTH_LOGGER)
    server = make_server()
    keys = Keys(tmp_path / "data")
    first_id, _ = keys.create("admin", "first")
    anonymous = Client(server.url)
    assert_401(anonymous.call("GET", "/"))
    keys.revoke(first_id)
    assert_no_key_401(anonymous.call("GET", "/"))

    second_id, second = keys.create("user", "second")
    assert client_with(server.url, bearer(second)).ok("GET", "/")["name"] == "mlstream"
    refused = assert_401(anonymous.call("GET", "/"))
    assert "no API key exists" not in refused["error"]["reason"]  # keys exist: the usual 401

    keys.revoke(second_id)
    assert_no_key_401(anonymous.call("GET", "/"))
    assert_no_key_401(client_with(server.url, bearer(second)).call("GET", "/"))
    assert len(auth_records(caplog, logging.WARNING)) == 2  # one per transition


def test_revoking_one_of_two_keys_is_not_the_no_key_state(make_server, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=AUTH_LOGGER)
    server = make_server()
    keys = Keys(tmp_path / "data")
    first_id, first = keys.create("admin", "first")
    _, second = keys.create("admin", "second")
    assert client_with(server.url, bearer(first)).ok("GET", "/")["name"] == "mlstream"
    keys.revoke(first_id)
    refused = assert_401(client_with(server.url, bearer(first)).call("GET", "/"))
    assert refused["error"]["reason"] == "the API key is not valid"
    assert client_with(server.url, bearer(second)).ok("GET", "/")["name"] == "mlstream"
    assert not auth_records(caplog, logging.WARNING)


def test_mlstream_serve_on_a_public_address_stays_locked_when_its_last_key_goes(tmp_path):
    keys = Keys(tmp_path / "data")
    key_id, secret = keys.create("admin", "ops")
    process, url = start_serve(tmp_path / "data", "--host", "0.0.0.0")
    try:
        local = loopback_url(url)
        assert client_with(local, bearer(secret)).ok("GET", "/")["name"] == "mlstream"
        keys.revoke(key_id)
        assert_no_key_401(Client(local).call("GET", "/"))
        assert_no_key_401(Client(local).call("GET", "/_cluster/settings"))
    finally:
        stderr = stop_serve(process)
    assert "WARNING" in stderr and "last API key" in stderr, stderr
    assert secret not in stderr and "Traceback" not in stderr


# --- the Authenticator itself ----------------------------------------------------------------

def test_refuse_without_keys_closes_a_server_that_never_had_one(tmp_path):
    store = SQLiteStore(tmp_path / "data")
    try:
        authenticator = Authenticator(store)
        assert authenticator.authenticate(None, "admin") is None  # open by default
        authenticator.refuse_without_keys()
        with pytest.raises(Unauthorized) as refused:
            authenticator.authenticate(None, "user")
        assert "mlstream keys create" in refused.value.reason
    finally:
        store.close()


class GatedStore:
    """A store whose counter and key records a test sets, and whose next scan can be held."""

    def __init__(self) -> None:
        self.counter = 1
        self.records: list[Record] = []
        self.hold_next_scan: threading.Event | None = None
        self.scan_entered = threading.Event()
        self.scans = 0

    def change_counter(self) -> int:
        return self.counter

    def scan(self, kind: str) -> list[Record]:
        if kind == "tenant":
            return []  # every key here is in the default tenant
        assert kind == "apikey"
        self.scans += 1
        records = list(self.records)  # the state as of the scan's start
        gate, self.hold_next_scan = self.hold_next_scan, None
        if gate is not None:
            self.scan_entered.set()
            assert gate.wait(HANG_GUARD), "the held scan was never released"
        return records


def key_record(key_id: str, secret: str, role: str = "admin") -> Record:
    return Record(key_id, {"name": key_id, "role": role, "created_time": 0}, hash_key(secret))


def test_a_slow_key_reload_does_not_block_other_requests():
    store = GatedStore()
    store.records = [key_record("a", "secret-a")]
    authenticator = Authenticator(store)  # type: ignore[arg-type]
    assert authenticator.authenticate("Bearer secret-a", "admin").key.key_id == "a"

    # Request 1 sees a new counter and reloads; its scan hangs on the store.
    store.counter = 2
    store.hold_next_scan = release = threading.Event()
    slow = threading.Thread(target=lambda: authenticator.authenticate("Bearer secret-a", "admin"), daemon=True)
    slow.start()
    assert store.scan_entered.wait(HANG_GUARD)
    try:
        # Request 2 must not wait for it: with the store read under the lock, it would.
        done = threading.Event()
        results: list[Any] = []

        def fast() -> None:
            results.append(authenticator.authenticate("Bearer secret-a", "admin"))
            done.set()

        threading.Thread(target=fast, daemon=True).start()
        assert done.wait(5), "a request waited for another request's key reload"
        assert results[0].key.key_id == "a"
    finally:
        release.set()
        slow.join(HANG_GUARD)


def test_a_stale_reload_never_overwrites_a_newer_one(caplog):
    # The last key is revoked while a slower reload still holds the state before that.
    # Swapped in after the newer one, the stale state would bring the revoked key back
    # until the next request reloaded again, and log the lock as lifted and imposed anew.
    caplog.set_level(logging.INFO, logger=AUTH_LOGGER)
    store = GatedStore()
    store.records = [key_record("old", "secret-old")]
    authenticator = Authenticator(store)  # type: ignore[arg-type]
    assert authenticator.keys_exist

    # Reload A reads counter 2 and scans the state of counter 2 (key "old"), slowly.
    store.counter = 2
    store.hold_next_scan = release = threading.Event()
    stale = threading.Thread(target=lambda: authenticator.keys_exist, daemon=True)
    stale.start()
    assert store.scan_entered.wait(HANG_GUARD)
    try:
        # Meanwhile "old" is revoked (counter 3); reload B swaps the empty set in.
        store.records = []
        store.counter = 3
        with pytest.raises(Unauthorized):
            authenticator.authenticate("Bearer secret-old", "admin")
    finally:
        release.set()
        stale.join(HANG_GUARD)
    assert not stale.is_alive()
    scans = store.scans
    # A finished last, with older data: it was dropped, so the state is B's, current
    # for counter 3 (no reload needed), and the lock was logged once, never lifted.
    assert not authenticator.keys_exist
    with pytest.raises(Unauthorized) as refused:
        authenticator.authenticate("Bearer secret-old", "admin")
    assert "no API key exists" in refused.value.reason
    assert store.scans == scans
    assert len(auth_records(caplog, logging.WARNING)) == 1
    assert auth_records(caplog, logging.INFO) == []
