"""Scenario 14: what a response-cache hit costs (issue 40), in the same run as the provider.

    first token   c=1, requests alternated: direct to the fake, through mlstream on a model
                  without a cache (plain), and on the same model with ``"cache"`` warmed by
                  one call (every request after it is a hit); _predict/stream
    whole         the same for non-stream ``_predict``
    store read    one entry read from the server's cache.db as the cache reads it (the
                  table's SELECT and the JSON decode), in this process, p50 of many

The goal: a hit's first token no more than 1 ms over direct plus one store read (the fake
answers at once, so direct is what an HTTP round trip and an SSE parse cost).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from .loadgen import alternate
from .procs import openai_connector
from .scenarios import Env, make_pair, preflight, sides_figures

SIDES = ("direct", "plain", "hit")
STORE_READS = 2000


def _cached_model(env: Env, model: str) -> str:
    connector_id = env.admin.ok("POST", "/_plugins/_ml/connectors/_create",
                                openai_connector(env.fake.address, model))["connector_id"]
    return env.admin.ok("POST", "/_plugins/_ml/models/_register?deploy=true",
                        {"name": f"bench cached {model}", "function_name": "remote", "connector_id": connector_id,
                         "cache": {"mode": "exact", "ttl_s": 3600}})["model_id"]


def cache_cost(env: Env) -> dict[str, Any]:
    cfg = env.cfg
    model = f"gpt-fake?chunks={cfg.latency_chunks}"
    out: dict[str, Any] = {}
    for stream, name in ((True, "first_token_c1"), (False, "whole_c1")):
        plain = env.pair(model, stream=stream)
        cached = make_pair(model, _cached_model(env, model), env.fake.address, env.mlstream.address, stream=stream)
        preflight(env, cached, cfg.latency_chunks)  # the miss that stores the entry
        targets = {"direct": (plain.addresses["direct"], plain.requests["direct"]),
                   "plain": (plain.addresses["mlstream"], plain.requests["mlstream"]),
                   "hit": (cached.addresses["mlstream"], cached.requests["mlstream"])}
        result = alternate(targets, cfg.latency_pairs, pause=cfg.latency_pause_ms / 1000, warmup=10, timeout=300)
        env.generator_runs.append({"label": f"cache {name}", "wall": round(result.wall, 3),
                                   "cpu": round(result.cpu, 3)})
        out[name] = {"model": model, "pause_ms": cfg.latency_pause_ms,
                     **sides_figures(result.responses, SIDES, stream)}
    read_ms = _store_read_ms(env)
    out["store_read_ms_p50"] = read_ms
    hit = out["first_token_c1"]["hit"]["added_ms"]["p50"]
    out["hit_added_over_store_read_ms_p50"] = None if read_ms is None else round(hit - read_ms, 3)
    out["goal"] = "hit first token <= direct + store read + 1 ms (p50)"
    out["met"] = out["hit_added_over_store_read_ms_p50"] is not None and out["hit_added_over_store_read_ms_p50"] <= 1.0
    out["note"] = ("c=1, direct / plain model / cached model (every request a hit) alternated; added_ms over "
                   "direct; store read: the cache's SELECT and JSON decode on the server's cache.db, in the bench")
    return out


def _store_read_ms(env: Env) -> float | None:
    """p50 of one entry's read, as ``CacheTable.get`` makes it, on the server's own file."""
    args = list(env.mlstream.proc.args)
    path = Path(args[args.index("--data-dir") + 1]) / "cache.db"
    if not path.exists():
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key FROM cache_entry LIMIT 1").fetchall()
        if not rows:
            return None
        key = rows[0][0]
        times = []
        for _ in range(STORE_READS):
            start = time.perf_counter()
            found = db.execute("SELECT doc, created FROM cache_entry WHERE key = ? AND expires > ?",
                               (key, time.time())).fetchall()
            json.loads(found[0][0])
            times.append(time.perf_counter() - start)
        return round(statistics.median(times) * 1000, 4)
    finally:
        db.close()
