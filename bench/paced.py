"""Scenario 13, paced: thousands of live streams at a chat model's pace, with default flags.

A fake provider that paces its answers (``mlstream.testing.fake_paced``: one thread,
readiness-driven, so it can itself hold 10,000 streams) answers 100 tokens at 20 tokens/s
after 200 ms, about 5.2 s a stream. At each level, ``level`` clients each read two streams
back to back on one keep-alive connection, their first requests spread evenly over one
stream's time: from then on ``level`` streams are live at once, and new ones arrive at the
rate a steady load brings (level / 5.2 s), not in one burst. The level runs straight to the fake and through a server started with default flags
(no ``--stream-workers``, no ``--stream-backlog``), on its OpenAI front
(``/v1/chat/completions``), the two sides one after the other at each level.

Per level and side: first token p50/p99 (request sent -> first content event), chunks/s
(content events in the steady window, from one stream's time to two, when all ``level``
streams are live), inter-chunk gap p99, errors by kind; for the
server: RSS before the level (idle) and its peak during it, KB per live stream
((peak - idle) / streams), CPU seconds per 1,000 chunks, and the streams it refused.
"""

from __future__ import annotations

import resource
from typing import Any

from .loadgen import DIRECT, Outcomes, User, build_request, summarize
from .procs import API_KEY, SEED_MESSAGES, Admin, proc_sample, register_model
from .scenarios import Env

MODEL = "paced?tokens=100&tps=20&first_ms=200"
TOKENS = 100
LEVELS = (16, 256, 1000, 4000, 10000)
QUICK_LEVELS = (16, 256)
# Two streams take about 10.4 s on pace (and the spread start 5.2 s more); a level that
# falls far behind is cut off here and its unfinished streams count as errors.
LEVEL_TIMEOUT_SECONDS = 120.0
SAMPLE_SECONDS = 0.5
STREAM_SECONDS = 0.2 + (TOKENS - 1) / 20
STREAMS_PER_CLIENT = 2


def _raise_open_files(needed: int) -> int:
    """The soft and, as root, the hard open-file limit raised to ``needed`` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        except (ValueError, OSError):
            pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _side(responses: list, wall: float, window_content: int, window_seconds: float) -> dict[str, Any]:
    out = Outcomes.of(responses)
    content = sum(r.content for r in responses)
    return {
        "streams": out.total, "ok": out.ok, "errors": out.errors, "statuses": out.statuses,
        "first_token_ms": summarize([r.t_first - r.t_send for r in responses], 1000, 1),
        "gap_ms": summarize([g for r in responses for g in (r.gaps or ())], 1000, 1),
        "chunks": content, "wall_s": round(wall, 2),
        "chunks_per_s": round(window_content / window_seconds, 1) if window_seconds > 0 else None,
    }


def paced(env: Env) -> dict[str, Any]:
    levels = QUICK_LEVELS if env.cfg.quick else LEVELS
    limit = _raise_open_files(3 * max(levels) + 4096)
    fake = env.procs.start_fake("fake-paced", "mlstream.testing.fake_paced", ("--api-key", API_KEY))
    server = env.procs.start_mlstream("mlstream-paced")  # default flags
    admin = Admin(server.address)
    figures: dict[str, Any] = {"model": MODEL, "open_file_limit": limit, "levels": {}}
    try:
        model_id = register_model(admin, fake.address, MODEL)
        auth = {"Authorization": f"Bearer {API_KEY}"}
        direct = build_request(fake.address, "/v1/chat/completions",
                               {"model": MODEL, "messages": SEED_MESSAGES, "stream": True},
                               dialect=DIRECT, stream=True, headers=auth, label="direct")
        through = build_request(server.address, "/v1/chat/completions",
                                {"model": model_id, "messages": SEED_MESSAGES, "stream": True},
                                dialect=DIRECT, stream=True, label="mlstream")
        for side, request, address in (("direct", direct, fake.address), ("mlstream", through, server.address)):
            warm = env.run([User(address, request)], timeout=30, label=f"paced warm-up {side}")
            if not warm.responses[0].ok or warm.responses[0].content != TOKENS:
                raise RuntimeError(f"paced preflight failed on the {side} side: {Outcomes.of(warm.responses)}")
        for level in levels:
            row: dict[str, Any] = {}
            for side, request, address in (("direct", direct, fake.address), ("mlstream", through, server.address)):
                env.settle(admin)
                idle = proc_sample(server.pid)
                rejected = admin.metrics().get("mlstream_streams_rejected_total", 0)
                peak = [idle.rss_kb]

                def sample(_: float) -> None:
                    peak[0] = max(peak[0], proc_sample(server.pid).rss_kb)

                users = [User(address, request, count=STREAMS_PER_CLIENT, start=STREAM_SECONDS * i / level,
                              track_gaps=True) for i in range(level)]
                result = env.run(users, timeout=LEVEL_TIMEOUT_SECONDS, tick=(SAMPLE_SECONDS, sample),
                                 window=(STREAM_SECONDS, 2 * STREAM_SECONDS), label=f"paced {level} {side}")
                figures_side = _side(result.responses, result.wall, result.window_content, result.window_seconds)
                figures_side["timed_out"] = result.timed_out
                if side == "mlstream":
                    after = proc_sample(server.pid)
                    chunks = figures_side["chunks"]
                    figures_side["server"] = {
                        "rss_idle_kb": idle.rss_kb, "rss_peak_kb": peak[0],
                        "kb_per_stream": round((peak[0] - idle.rss_kb) / level, 1),
                        "cpu_s_per_1000_chunks": round((after.cpu - idle.cpu) / chunks * 1000, 3) if chunks else None,
                        "threads_idle": idle.threads,
                        "rejected": admin.metrics().get("mlstream_streams_rejected_total", 0) - rejected,
                    }
                row[side] = figures_side
            direct_rate, ml_rate = row["direct"]["chunks_per_s"], row["mlstream"]["chunks_per_s"]
            row["chunks_ratio"] = round(ml_rate / direct_rate, 3) if direct_rate and ml_rate else None
            first = row["mlstream"]["first_token_ms"], row["direct"]["first_token_ms"]
            row["added_first_token_ms"] = {q: (round(first[0][q] - first[1][q], 1)
                                               if first[0][q] is not None and first[1][q] is not None else None)
                                           for q in ("p50", "p99")}
            row["on_pace_chunks_per_s"] = round(level * TOKENS / STREAM_SECONDS, 1)
            figures["levels"][str(level)] = row
        return figures
    finally:
        admin.close()
        env.procs.stop(server)
        env.procs.stop(fake)
