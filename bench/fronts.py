"""Scenario 11: the Anthropic Messages and OpenAI Responses fronts against ``_predict/stream``.

    relay        scenario 1's relay at ``openai_concurrency`` through ``/v1/messages`` and
                 ``/v1/responses`` (an OpenAI-interface model: its chunks read as chat and
                 written as each API's events), through ``_predict/stream`` and direct, each
                 in every round, in ``round_order`` (as many rounds as sides);
                 the figure is each front's chunks/s over the ml-commons front's (goal >=
                 0.90), each side also against the one pooled direct figure
    first token  scenario 2's first token at c=1, the four targets (direct, ml-commons,
                 Messages, Responses) alternated request by request (goal: each front's p50
                 over ml-commons' <= 1.10)
    anthropic    an Anthropic model relayed as it is by ``/v1/messages`` and streamed by
                 ``_predict/stream``, against scenario 9's Anthropic fake, at
                 ``provider_concurrency``

Responses are stored (``store`` defaults to true): each stream ends with one write to the
responses file of the store, as it would in use.
"""

from __future__ import annotations

from typing import Any

from .loadgen import Dialect, alternate, build_request
from .procs import SEED_MESSAGES
from .scenarios import (BENCH_PROMPT, Env, Pair, _provider_pair, _relay_level, preflight, provider_benches, ratio,
                        relay_sides, sides_figures)

# The loadgen's markers for each front's events (bench/loadgen.py reads their first text).
MESSAGES = Dialect("messages", b'"type":"text_delta"', b"event: message_stop", error=b"event: error")
RESPONSES = Dialect("responses", b'"type":"response.output_text.delta"', b"event: response.completed",
                    error=b"event: response.failed")
FRONTS = ("messages", "responses")
SIDES = ("direct", "ml_commons", *FRONTS)


def front_request(address: tuple[str, int], front: str, model_id: str, *, store: bool = True) -> Any:
    """A streamed request of the seed's messages through ``front``; ``store``: the Responses
    front keeps the response (its default), as the bench's scenario does."""
    system, user = SEED_MESSAGES[0]["content"], SEED_MESSAGES[1]["content"]
    if front == "messages":
        body = {"model": model_id, "max_tokens": 4096, "stream": True, "system": system,
                "messages": [{"role": "user", "content": user}]}
        return build_request(address, "/v1/messages", body, dialect=MESSAGES, stream=True,
                             label="messages")
    body = {"model": model_id, "stream": True, "instructions": system, "input": user}
    if not store:
        body["store"] = False
    return build_request(address, "/v1/responses", body, dialect=RESPONSES, stream=True,
                         label="responses")


def new_fronts(env: Env) -> dict[str, Any]:
    cfg = env.cfg
    out: dict[str, Any] = {"relay": {}}
    model = f"gpt-fake?chunks={cfg.throughput_chunks}"
    ml_pair = env.pair(model, max_connection=max(cfg.openai_concurrency))
    preflight(env, ml_pair, cfg.throughput_chunks)
    targets = {"direct": (ml_pair.addresses["direct"], ml_pair.requests["direct"]),
               "ml_commons": (env.mlstream.address, ml_pair.requests["mlstream"])}
    for front in FRONTS:
        targets[front] = (env.mlstream.address, front_request(env.mlstream.address, front, ml_pair.model_id))
        preflight(env, Pair(ml_pair.model, {"direct": ml_pair.requests["direct"], "mlstream": targets[front][1]},
                            ml_pair.addresses, ml_pair.model_id), cfg.throughput_chunks)
    for c in cfg.openai_concurrency:
        # Every side in every round, in a balanced order: each front meets the same load as
        # _predict/stream, and one direct figure (the same request for all) serves them all.
        sides = relay_sides(env, targets, c, env.fake, rounds=None if cfg.quick else len(targets))
        direct = sides["direct"]
        level: dict[str, Any] = {"direct_pooled_chunks_per_s": direct["chunks_per_s"]}
        for side in ("ml_commons", *FRONTS):
            level[side] = {"direct": direct, "mlstream": sides[side],
                           "ratio_chunks": ratio(sides[side]["chunks_per_s"], direct["chunks_per_s"]),
                           "ratio_mb": ratio(sides[side]["mb_per_s"], direct["mb_per_s"])}
        for front in FRONTS:
            level[f"{front}_over_ml_commons"] = ratio(sides[front]["chunks_per_s"], sides["ml_commons"]["chunks_per_s"])
        out["relay"][str(c)] = level
    out["first_token_c1"] = _first_token(env)
    out["anthropic_relay"] = _anthropic_relay(env)
    out["note"] = ("relay: direct, ml-commons, Messages and Responses in every round, in a Williams order; each "
                   "front's chunks/s over the ml-commons front's (goal >= 0.90), each side also x direct (one "
                   "pooled figure); first token: request's first byte -> first event with text, c=1, the four "
                   "targets alternated (goal: front p50 / ml-commons p50 <= 1.10); anthropic_relay: an Anthropic "
                   "model relayed by /v1/messages vs _predict/stream, one pooled direct figure")
    return out


def _first_token(env: Env) -> dict[str, Any]:
    cfg = env.cfg
    latency_model = f"gpt-fake?chunks={cfg.latency_chunks}"
    ml_pair = env.pair(latency_model, max_connection=4)
    targets = {"direct": (ml_pair.addresses["direct"], ml_pair.requests["direct"]),
               "ml_commons": (ml_pair.addresses["mlstream"], ml_pair.requests["mlstream"])}
    for front in FRONTS:
        targets[front] = (env.mlstream.address, front_request(env.mlstream.address, front, ml_pair.model_id))
    result = alternate(targets, cfg.latency_pairs, pause=cfg.latency_pause_ms / 1000, warmup=10, timeout=300)
    env.generator_runs.append({"label": "new fronts first token", "wall": round(result.wall, 3),
                               "cpu": round(result.cpu, 3)})
    first: dict[str, Any] = {"model": latency_model, "pause_ms": cfg.latency_pause_ms,
                             **sides_figures(result.responses, SIDES, True)}
    for front in FRONTS:
        first[f"{front}_over_ml_commons_p50"] = ratio(first[front]["ms"]["p50"], first["ml_commons"]["ms"]["p50"])
    return first


def _anthropic_relay(env: Env) -> dict[str, Any]:
    cfg = env.cfg
    bench = next(b for b in provider_benches() if b.name == "anthropic")
    knobs = {"chunks": cfg.provider_chunks}
    fake = env.procs.start_fake(f"fake-{bench.name}-messages-front", bench.module, bench.args)
    try:
        ml_pair = _provider_pair(env, bench, fake, knobs)
        request = build_request(env.mlstream.address, "/v1/messages",
                                {"model": ml_pair.model_id, "max_tokens": 1024, "stream": True,
                                 "messages": [{"role": "user", "content": BENCH_PROMPT}]},
                                dialect=bench.dialect, stream=True, label="messages")
        messages_pair = Pair(bench.name, {"direct": ml_pair.requests["direct"], "mlstream": request},
                             ml_pair.addresses, ml_pair.model_id)
        preflight(env, ml_pair, cfg.provider_chunks)
        preflight(env, messages_pair, cfg.provider_chunks)
        ml = _relay_level(env, ml_pair, cfg.provider_concurrency, fake)
        messages = _relay_level(env, messages_pair, cfg.provider_concurrency, fake)
    finally:
        env.procs.stop(fake)
    direct = (ml["direct"]["chunks_per_s"] + messages["direct"]["chunks_per_s"]) / 2
    return {"provider": bench.interface, "chunks_per_stream": cfg.provider_chunks,
            "concurrency": cfg.provider_concurrency, "ml_commons": ml, "messages": messages,
            "direct_pooled_chunks_per_s": round(direct, 1),
            "messages_over_ml_commons": ratio(messages["mlstream"]["chunks_per_s"], ml["mlstream"]["chunks_per_s"])}
