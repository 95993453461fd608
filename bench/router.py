"""Scenario 12: what a router model costs (issue 27), against a plain model in the same run.

    relay        scenario 1's relay at ``openai_concurrency`` through ``_predict/stream`` of a
                 plain model and of a round-robin router over two healthy models on the same
                 fake, each paired with its own direct trials; the figure is the router's
                 mlstream/direct ratio over the plain model's
    first token  scenario 2's first token at c=1: direct, the plain model and the router
                 alternated request by request; the router's added p50 over the plain model's
    whole        the same for non-stream ``_predict``
"""

from __future__ import annotations

from typing import Any

from .loadgen import alternate
from .procs import register_model
from .scenarios import Env, Pair, _relay_level, make_pair, preflight, ratio, sides_figures

SIDES = ("direct", "plain", "router")


def _router(env: Env, model: str, max_connection: int | None) -> str:
    targets = [register_model(env.admin, env.fake.address, model, max_connection=max_connection) for _ in range(2)]
    return env.admin.ok("POST", "/_plugins/_ml/models/_register?deploy=true",
                        {"name": f"bench router {model}", "function_name": "remote",
                         "routing": {"strategy": "round_robin", "targets": targets}})["model_id"]


def router_cost(env: Env) -> dict[str, Any]:
    cfg = env.cfg
    out: dict[str, Any] = {"relay": {}}
    model = f"gpt-fake?chunks={cfg.throughput_chunks}"
    concurrency = max(cfg.openai_concurrency)
    plain = env.pair(model, max_connection=concurrency)
    routed = make_pair(model, _router(env, model, concurrency), env.fake.address, env.mlstream.address, stream=True)
    for pair in (plain, routed):
        preflight(env, pair, cfg.throughput_chunks)
    for c in cfg.openai_concurrency:
        level = {"plain": _relay_level(env, plain, c, env.fake), "router": _relay_level(env, routed, c, env.fake)}
        level["router_over_plain"] = ratio(level["router"]["ratio_chunks"], level["plain"]["ratio_chunks"])
        out["relay"][str(c)] = level
    latency_model = f"gpt-fake?chunks={cfg.latency_chunks}"
    for stream, name in ((True, "first_token_c1"), (False, "whole_c1")):
        out[name] = _alternated(env, latency_model, stream)
    out["note"] = ("relay: chunks/s ratio mlstream/direct for a plain model and a round-robin router over two "
                   "models, and the router's over the plain one's; first_token_c1 / whole_c1: c=1, direct, plain "
                   "and router alternated, each one's added p50 over direct")
    return out


def _alternated(env: Env, model: str, stream: bool) -> dict[str, Any]:
    cfg = env.cfg
    plain = env.pair(model, max_connection=4, stream=stream)
    routed: Pair = make_pair(model, _router(env, model, 4), env.fake.address, env.mlstream.address, stream=stream)
    targets = {"direct": (plain.addresses["direct"], plain.requests["direct"]),
               "plain": (plain.addresses["mlstream"], plain.requests["mlstream"]),
               "router": (routed.addresses["mlstream"], routed.requests["mlstream"])}
    result = alternate(targets, cfg.latency_pairs, pause=cfg.latency_pause_ms / 1000, warmup=10, timeout=300)
    env.generator_runs.append({"label": f"router {'first token' if stream else 'whole'}",
                               "wall": round(result.wall, 3), "cpu": round(result.cpu, 3)})
    figures: dict[str, Any] = {"model": model, "pause_ms": cfg.latency_pause_ms,
                               **sides_figures(result.responses, SIDES, stream)}
    figures["router_minus_plain_added_p50_ms"] = round(
        figures["router"]["added_ms"]["p50"] - figures["plain"]["added_ms"]["p50"], 3)
    return figures
