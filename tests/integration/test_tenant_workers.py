"""Tenants across processes: ``--workers 2`` on one PostgreSQL database. A tenant's budget
holds under concurrent streams served by both workers (reservations, docs/security.md), and
a revoked key is refused at once by the worker that did not revoke it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.support.clients import Client, bearer, client_with
from tests.support.connectors import openai_connector
from tests.support.timeouts import HANG_GUARD, poll_until

from tests.support.servers import Deployment

pytestmark = pytest.mark.slow

MLS = "/_plugins/_mlstream"
BUDGET = 60.0
MAX_TOKENS = 16
CONCURRENT = 32


@pytest.fixture
def shared(tmp_path: Path, postgres_url: str):
    running = Deployment(tmp_path, 2, "--store", postgres_url)
    yield running
    running.stop()


def admin_of(url: str) -> Client:
    made = Client(url).call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
    assert made.status == 200, made.body
    return client_with(url, bearer(made.body["key"]))


def test_a_tenant_budget_holds_under_32_concurrent_streams_across_two_workers(shared, fake):
    admin = admin_of(shared.url)
    connector_id = admin.ok("POST", "/_plugins/_ml/connectors/_create",
                            openai_connector(fake, model="gpt-fake?chunks=6&delay_ms=20"))["connector_id"]
    # one unit of cost per token, in and out: a call's cost is its token count
    model_id = admin.ok("POST", "/_plugins/_ml/models/_register?deploy=true", {
        "name": "priced", "function_name": "remote", "connector_id": connector_id,
        "pricing": {"input_per_1m": 1_000_000, "output_per_1m": 1_000_000}})["model_id"]
    admin.ok("POST", f"{MLS}/tenants", {"name": "team", "budget": BUDGET, "budget_period": "day"})
    secret = admin.ok("POST", f"{MLS}/keys", {"name": "t-user", "tenant": "team"})["key"]
    sdk = openai.OpenAI(base_url=shared.url + "/v1", api_key=secret, max_retries=0, timeout=HANG_GUARD)
    messages = [{"role": "user", "content": "count to six"}]

    def one(_: int) -> str:
        try:
            stream = sdk.chat.completions.create(model=model_id, messages=messages, stream=True,
                                                 max_tokens=MAX_TOKENS)
            for _chunk in stream:
                pass
            return "served"
        except openai.RateLimitError as refused:
            assert refused.body["code"] == "insufficient_quota" and refused.body["scope"] == "tenant"
            return "refused"

    outcomes: list[str] = []
    with ThreadPoolExecutor(CONCURRENT) as threads:
        for _wave in range(8):  # bounded: waves until the budget refuses a whole wave
            wave = list(threads.map(one, range(CONCURRENT)))
            outcomes += wave
            if "served" not in wave:
                break
    served = outcomes.count("served")
    assert served and "refused" in outcomes

    def tenant_usage() -> dict:
        return admin.ok("GET", f"{MLS}/usage?tenant=team")["totals"]
    assert poll_until(lambda: tenant_usage()["requests"] == served, HANG_GUARD)
    totals = tenant_usage()
    spent = totals["cost"]
    per_call = spent / served
    # What one call reserves: its request's bytes as input tokens plus its output cap.
    estimate = max(per_call, 0) + MAX_TOKENS + 64
    # without reservations the first wave alone admits all 32 and spends ~1,150
    assert BUDGET <= spent < BUDGET + estimate, (spent, served, outcomes.count("refused"))


def test_a_key_revoked_through_one_worker_is_refused_by_the_other_at_once(shared, fake):
    admin = admin_of(shared.url)
    model_id = admin.model_for(openai_connector(fake))
    admin.ok("POST", f"{MLS}/tenants", {"name": "team"})
    secret = admin.ok("POST", f"{MLS}/keys", {"name": "t-user", "tenant": "team"})["key"]
    for _ in range(8):  # fresh connections: the kernel spreads them over both workers
        assert client_with(shared.url, bearer(secret)).call("GET", "/v1/models").status == 200
    admin.ok("DELETE", f"{MLS}/keys/t-user")
    for _ in range(16):
        assert client_with(shared.url, bearer(secret)).call("GET", "/v1/models").status == 401
    secret = admin.ok("POST", f"{MLS}/keys", {"name": "t-user2", "tenant": "team"})["key"]
    assert client_with(shared.url, bearer(secret)).call("GET", f"/_plugins/_ml/models/{model_id}").status == 200
    admin.ok("DELETE", f"{MLS}/tenants/team")
    for _ in range(16):
        assert client_with(shared.url, bearer(secret)).call("GET", "/v1/models").status == 401
