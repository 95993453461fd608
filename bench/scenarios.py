"""The scenarios of the benchmark: six run against the fake provider directly and
through mlstream, alternating, in the same run; the seventh, a keep-alive churn
soak, runs through mlstream only and fails the run on a freeze or a leak; the
eighth pairs embedding ``_predict`` calls with the fake's ``/v1/embeddings``; the
ninth repeats the relay of the first through each added provider's decoder, each
against its own fake.

Each scenario is a function ``(Env) -> dict`` whose dict goes into the JSON as
it is; ``bench/report.py`` turns those dicts into the Markdown tables. The sizes
come from :class:`Config` (``--quick`` shrinks them, never the method).

    Env            what the scenarios share: processes, the load generator, pairs
      Pair         one fake answer, as a direct request and as an mlstream request
    relay_throughput  added_latency  slow_streams (+ on-pace capacity)
    backpressure      cancellation   admission      churn (ChurnKind, CHURN_MIX)
    embedding_predict (+ the JSON and post-process steps of one answer, timed in-process)
    provider_relay    (ProviderBench: the relay through each added provider's decoder)
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from mlstream import processing, speedups
from mlstream.painless import BUILTINS, Script, compile_program, compile_script, parse
from mlstream.testing.embeddings import openai_embeddings
from mlstream.testing.painless_scripts import OPENAI_EMBEDDING_POST, QUANTIZED_POST
from mlstream.testing.fake_openai import FakeOpenAI, fake_tokens, parse_scenario

from .loadgen import (DIRECT, MLSTREAM, PLAIN, WHOLE, Dialect, LoadGenerator, Outcomes, Request, Response,
                      RunResult, User, alternate, build_get, build_request, percentile, summarize)
from .procs import (API_KEY, EMBEDDING_MODEL, SEED_MESSAGES, STREAM_INTERFACE, Admin, Child, Processes, ProcSample,
                    openai_embedding_connector, register_connector, register_model, tcp_port, tcp_rows)

SIDES = ("direct", "mlstream")
SETTLE_SECONDS = 15.0       # longest wait for mlstream to finish streams between trials
MAX_BATCH_EVENTS = 64       # mlstream/server/sse_writer.py: events written per batch
READ_SIZE = 64 * 1024       # mlstream/streaming/reader.py: bytes asked of the upstream per read


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int                       # paired rounds (direct, mlstream alternating first)
    warmup: float                     # seconds left out at the start of a timed trial
    trial_seconds: float              # measured seconds of a throughput / c=64 latency trial
    throughput_concurrency: tuple[int, ...] = (1, 16, 64)
    throughput_chunks: int = 200
    latency_chunks: int = 10
    latency_pairs: int = 600          # concurrency 1: requests per side, direct and mlstream alternated
    latency_pause_ms: float = 10.0    # before each of them (servers idle in between, as for a real client)
    # scenario 2's client-realistic runs: every SSE event parsed, each recorded request
    # after the same server's previous answer (back to back or paused), long and short answers
    latency_long_chunks: int = 200
    latency_short_chunks: int = 5
    latency_client_pairs: int = 300
    slow_streams: int = 1000
    slow_chunks: int = 50
    slow_delay_ms: int = 100
    slow_ramp: float = 1.0            # seconds over which the slow streams are started
    capacity_levels: tuple[int, ...] = (40, 60, 80, 100, 120, 140, 160, 180, 200, 240, 280, 320, 400, 480, 560,
                                        640, 800, 1000)
    capacity_chunks: int = 100
    capacity_delay_ms: int = 20
    backpressure_chunks: int = 50_000     # x 1000 bytes: ~62 MB on the wire, far more than TCP buffers hold
    backpressure_chunk_bytes: int = 1000
    backpressure_pause: float = 5.0
    cancel_samples: int = 60
    provider_chunks: int = 200        # scenario 9: tokens per answer, and clients at once
    provider_concurrency: int = 16
    cancel_delay_ms: int = 20
    cancel_silent_samples: int = 8    # the slow-provider variant (0 skips it)
    cancel_silent_delay_ms: int = 500
    admission_workers: int = 4
    admission_backlog: int = 4
    admission_probes: int = 300
    admission_fill_chunks: int = 30
    admission_fill_delay_ms: int = 100
    churn_seconds: float = 60.0
    churn_warmup: float = 1.0         # seconds of the mix before the "before" sample
    churn_slow_factor: float = 5.0    # a request may take this many times its expected time
    churn_floor_ms: float = 400.0     # expected time is at least this (the soak's own load; see churn())
    churn_max_stall: float = 2.0      # seconds the server may go without completing a request
    churn_max_start_gap: float = 1.0  # seconds it may go without starting an answer to a stream request
    churn_thread_tolerance: int = 8
    churn_fd_tolerance: int = 8
    churn_rss_growth_mb: int = 64
    embedding_docs: tuple[int, ...] = (1, 16, 256)
    openai_concurrency: tuple[int, ...] = (1, 16)   # scenario 10: relay levels through both fronts
    embedding_pairs: int = 200
    post_process_docs: int = 256      # documents of the answer profiled in-process and of script_vs_builtin
    post_process_repeat: int = 5      # the profile's steps: best of this many (the per-float loops: of 2)

    @classmethod
    def of(cls, quick: bool) -> "Config":
        """The full run's sizes, or the smoke run's (the same method, smaller and shorter)."""
        if not quick:
            return cls(quick=False, rounds=3, warmup=0.5, trial_seconds=2.5)
        # Each code path once, at the smallest size that still takes it: one concurrency level
        # per relay (16: its goals' level), a capacity step up, a backpressure answer longer than
        # the TCP buffers of both hops, every kind of churn client more than once.
        return cls(quick=True, rounds=1, warmup=0.1, trial_seconds=0.3, throughput_concurrency=(16,),
                   latency_pairs=20, latency_client_pairs=10, slow_streams=50, slow_chunks=10, slow_ramp=0.25,
                   capacity_levels=(20, 40), capacity_chunks=10, backpressure_chunks=12_000,
                   backpressure_pause=1.0, cancel_samples=4, cancel_silent_samples=0, admission_probes=30,
                   admission_fill_chunks=10, churn_seconds=4.0, embedding_pairs=5, openai_concurrency=(16,),
                   post_process_docs=16, post_process_repeat=1)


@dataclass
class Pair:
    """The same fake answer asked for directly and through an mlstream model."""

    model: str
    requests: dict[str, Request]
    addresses: dict[str, tuple[str, int]]
    model_id: str


@dataclass
class Env:
    cfg: Config
    procs: Processes
    fake: Child
    mlstream: Child
    admin: Admin
    queue_chunks: int = 64            # the main server's --stream-queue-chunks
    gen: LoadGenerator = field(default_factory=LoadGenerator)
    # every load-generator run: its wall time and the generator thread's CPU time
    generator_runs: list[dict[str, Any]] = field(default_factory=list)

    # -- building requests

    def pair(self, model: str, *, stream: bool = True, max_connection: int | None = None,
             server: Child | None = None, admin: Admin | None = None,
             fake_address: tuple[str, int] | None = None) -> Pair:
        server = server or self.mlstream
        admin = admin or self.admin
        fake_address = fake_address or self.fake.address
        model_id = register_model(admin, fake_address, model, max_connection=max_connection)
        return make_pair(model, model_id, fake_address, server.address, stream=stream)

    # -- running load

    def run(self, users: list[User], *, timeout: float, window: tuple[float, float] | None = None,
            tick: tuple[float, Callable[[float], None]] | None = None, label: str = "") -> RunResult:
        result = self.gen.run(users, timeout=timeout, window=window, tick=tick)
        self.generator_runs.append({"label": label, "wall": round(result.wall, 3), "cpu": round(result.cpu, 3)})
        return result

    def settle(self, admin: Admin | None = None) -> bool:
        """Wait until mlstream runs and queues no stream (bounded)."""
        admin = admin or self.admin
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            m = admin.metrics()
            if m.get("mlstream_streams_active", 0) == 0 and m.get("mlstream_streams_queued", 0) == 0:
                return True
            time.sleep(0.02)
        return False

    def paired(self, trial: Callable[[str], dict[str, Any]], rounds: int | None = None) -> dict[str, list]:
        """Run ``trial(side)`` for both sides, ``rounds`` times, alternating which goes first."""
        out: dict[str, list] = {side: [] for side in SIDES}
        for r in range(rounds or self.cfg.rounds):
            for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                out[side].append(trial(side))
                self.settle()
        return out


def make_pair(model: str, model_id: str, fake_address: tuple[str, int], ml_address: tuple[str, int], *,
              stream: bool) -> Pair:
    direct_body: dict[str, Any] = {"model": model, "messages": SEED_MESSAGES}
    auth = {"Authorization": f"Bearer {API_KEY}"}
    if stream:
        direct_body["stream"] = True
        ml = build_request(ml_address, f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           {"parameters": {"messages": SEED_MESSAGES, "_llm_interface": STREAM_INTERFACE}},
                           dialect=MLSTREAM, stream=True, label="mlstream")
        direct = build_request(fake_address, "/v1/chat/completions", direct_body, dialect=DIRECT, stream=True,
                               headers=auth, label="direct")
    else:
        ml = build_request(ml_address, f"/_plugins/_ml/models/{model_id}/_predict",
                           {"parameters": {"messages": SEED_MESSAGES}}, dialect=WHOLE, stream=False,
                           label="mlstream")
        direct = build_request(fake_address, "/v1/chat/completions", direct_body, dialect=WHOLE, stream=False,
                               headers=auth, label="direct")
    return Pair(model, {"direct": direct, "mlstream": ml},
                {"direct": fake_address, "mlstream": ml_address}, model_id)


def expected_chunks(model: str) -> int:
    return len(fake_tokens(parse_scenario(model, {})))


def preflight(env: Env, pair: Pair, chunks: int) -> None:
    """One request per side must come back whole, or the figures would be nonsense."""
    for side in SIDES:
        result = env.run([User(pair.addresses[side], pair.requests[side])], timeout=30, label="preflight")
        r = result.responses[0]
        if not r.ok or (r.request.stream and r.content != chunks):
            raise RuntimeError(
                f"preflight {side} {pair.model}: status {r.status}, error {r.error}, {r.content} content "
                f"events of {chunks}, end marker {r.ended}: does the wire format still match "
                f"bench/loadgen.py's Dialect markers?")


def cpu_share(before: ProcSample, after: ProcSample, wall: float) -> float:
    return round((after.cpu - before.cpu) / wall, 3) if wall > 0 else math.nan


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return round(a / b, digits)


def diff(a: float | None, b: float | None, digits: int = 3) -> float | None:
    if a is None or b is None:
        return None
    return round(a - b, digits)


# =========================================================================== 1. relay throughput


def relay_throughput(env: Env) -> dict[str, Any]:
    """Closed loop: ``c`` keep-alive clients, each streaming 200-chunk answers back to back.

    Chunks/s and MB/s count only what arrives inside the measuring window (after
    a warm-up, before the clients stop asking), so ramp-up and tail are left out.
    """
    cfg = env.cfg
    model = f"gpt-fake?chunks={cfg.throughput_chunks}"
    pair = env.pair(model, max_connection=max(cfg.throughput_concurrency))
    preflight(env, pair, cfg.throughput_chunks)
    levels = {str(c): _relay_level(env, pair, c, env.fake) for c in cfg.throughput_concurrency}
    return {"model": model, "chunks_per_stream": cfg.throughput_chunks, "concurrency": levels,
            "note": "MB/s counts every byte off the socket (HTTP framing included); the two wire formats "
                    "differ in size per chunk, so compare chunks/s."}


def _relay_level(env: Env, pair: Pair, c: int, fake: Child) -> dict[str, Any]:
    """``c`` keep-alive clients streaming ``pair``'s answer back to back, direct and through
    mlstream in alternating rounds: chunks/s and MB/s inside the measuring window."""
    level: dict[str, Any] = relay_sides(env, {side: (pair.addresses[side], pair.requests[side]) for side in SIDES},
                                        c, fake)
    level["ratio_chunks"] = ratio(level["mlstream"]["chunks_per_s"], level["direct"]["chunks_per_s"])
    level["ratio_mb"] = ratio(level["mlstream"]["mb_per_s"], level["direct"]["mb_per_s"])
    return level


def round_order(sides: list[str], r: int) -> list[str]:
    """Round ``r``'s order of ``sides``: rows of a Williams design, so that over as many rounds
    as sides each goes first once and (for an even count) follows every other side once. A
    plain rotation keeps each side behind the same one every round, and what a trial leaves
    for the next (garbage, writes, warm or cold caches) would favour or burden one side."""
    n = len(sides)
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    return [sides[(index + r) % n] for index in first]


def relay_sides(env: Env, targets: dict[str, tuple[tuple[str, int], Request]], c: int, fake: Child,
                rounds: int | None = None) -> dict[str, dict[str, Any]]:
    """Scenario 1's closed loop for each side of ``targets`` (address and request), a trial of
    each in every round, in ``round_order`` (two sides: alternating which goes first): each
    side's chunks/s and MB/s inside the measuring windows of all its trials."""
    cfg = env.cfg

    def trial(side: str) -> dict[str, Any]:
        end = cfg.warmup + cfg.trial_seconds
        address, request = targets[side]
        users = [User(address, request, count=10**9, stop_issuing=end) for _ in range(c)]
        ml0, fake0 = env.mlstream.sample(), fake.sample()
        result = env.run(users, timeout=end + 60, window=(cfg.warmup, end), label=f"throughput c={c} {side}")
        ml1, fake1 = env.mlstream.sample(), fake.sample()
        out = Outcomes.of(result.responses)
        seconds = result.window_seconds
        return {"chunks": result.window_content, "bytes": result.window_bytes, "seconds": round(seconds, 3),
                "chunks_per_s": round(result.window_content / seconds, 1) if seconds else None,
                "streams": out.to_json(), "generator_cpu": round(result.cpu / result.wall, 3),
                "mlstream_cpu": cpu_share(ml0, ml1, result.wall), "fake_cpu": cpu_share(fake0, fake1, result.wall)}

    sides = list(targets)
    trials: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(rounds or cfg.rounds):
        for side in round_order(sides, r):
            trials[side].append(trial(side))
            env.settle()
    out: dict[str, dict[str, Any]] = {}
    for side, rows in trials.items():
        chunks = sum(t["chunks"] for t in rows)
        nbytes = sum(t["bytes"] for t in rows)
        seconds = sum(t["seconds"] for t in rows)
        out[side] = {
            "chunks_per_s": round(chunks / seconds, 1) if seconds else None,
            "mb_per_s": round(nbytes / seconds / 1e6, 3) if seconds else None,
            "rounds_chunks_per_s": [t["chunks_per_s"] for t in rows],
            "streams_ok": sum(t["streams"]["ok"] for t in rows),
            "streams_total": sum(t["streams"]["total"] for t in rows),
            "errors": _merge(t["streams"]["errors"] for t in rows),
            "generator_cpu": _mean(t["generator_cpu"] for t in rows),
            "mlstream_cpu": _mean(t["mlstream_cpu"] for t in rows),
            "fake_cpu": _mean(t["fake_cpu"] for t in rows),
        }
    return out


# =========================================================================== 2. added latency


def added_latency(env: Env) -> dict[str, Any]:
    """What mlstream adds to the first token a client sees (stream) and to a whole answer (non-stream).

    Concurrency 1: one client asks the fake directly and through mlstream in turn,
    request by request, in one run (:func:`bench.loadgen.alternate`), pausing
    ``latency_pause_ms`` before each request, as a client does between requests:
    both servers sit idle in between, as they do for a real client. Stream: from
    the request's first byte written to the first SSE event whose content is not
    empty (the fake's first event is an empty role delta; mlstream's first event
    is the first token). Non-stream: to the whole answer. The added time is taken
    pair by pair (mlstream − the direct request next to it) and its median, p90 and
    p99 reported. For comparison, the stream figure is also taken back to back (no
    pause: the next request written the moment the previous answer ended, as the
    closed loop of the other scenarios does), where mlstream's threads never go idle.
    Concurrency 64: closed loop, each side for a trial, alternating.
    """
    cfg = env.cfg
    model = f"gpt-fake?chunks={cfg.latency_chunks}"
    pairs = {"stream": env.pair(model, max_connection=64),
             "non_stream": env.pair(model, stream=False, max_connection=64)}
    preflight(env, pairs["stream"], cfg.latency_chunks)
    preflight(env, pairs["non_stream"], cfg.latency_chunks)
    out: dict[str, Any] = {"model": model, "pause_ms": cfg.latency_pause_ms}
    plans = [("stream_c1", "stream", cfg.latency_pause_ms), ("non_stream_c1", "non_stream", cfg.latency_pause_ms),
             ("stream_c1_back_to_back", "stream", 0.0)]
    for key, kind, pause_ms in plans:
        pair = pairs[kind]
        targets = {side: (pair.addresses[side], pair.requests[side]) for side in SIDES}
        result = alternate(targets, cfg.latency_pairs, pause=pause_ms / 1000, warmup=10, timeout=300)
        env.generator_runs.append({"label": f"latency {key}", "wall": round(result.wall, 3),
                                   "cpu": round(result.cpu, 3)})
        out[key] = _alternated(result.responses, kind == "stream", pause_ms)
    out["client"] = _client_runs(env)
    for kind, pair in pairs.items():
        def trial(side: str, pair: Pair = pair, kind: str = kind) -> dict[str, Any]:
            addr, req = pair.addresses[side], pair.requests[side]
            end = cfg.warmup + cfg.trial_seconds
            users = [User(addr, req, count=10**9, stop_issuing=end) for _ in range(64)]
            result = env.run(users, timeout=end + 60, label=f"latency {kind} c=64 {side}")
            first = min(r.t_send for r in result.responses)
            kept = [r for r in result.responses if r.t_send >= first + cfg.warmup]
            values = [_latency_value(r, kind == "stream") for r in kept if r.ok]
            return {"values": values, "outcomes": Outcomes.of(kept).to_json(),
                    "generator_cpu": round(result.cpu / result.wall, 3)}
        trials = env.paired(trial)
        entry: dict[str, Any] = {}
        for side in SIDES:
            values = [v for t in trials[side] for v in t["values"]]
            entry[side] = {"ms": summarize(values, 1000),
                           "ok": sum(t["outcomes"]["ok"] for t in trials[side]),
                           "total": sum(t["outcomes"]["total"] for t in trials[side]),
                           "errors": _merge(t["outcomes"]["errors"] for t in trials[side]),
                           "generator_cpu": _mean(t["generator_cpu"] for t in trials[side])}
        entry["overhead_ms_p50"] = diff(entry["mlstream"]["ms"]["p50"], entry["direct"]["ms"]["p50"])
        entry["overhead_ms_p99"] = diff(entry["mlstream"]["ms"]["p99"], entry["direct"]["ms"]["p99"])
        out[f"{kind}_c64"] = entry
    out["note"] = ("stream: request's first byte written -> first SSE event with non-empty content received "
                   "(JSON-checked); non-stream: -> whole response received. c=1: one client, keep-alive "
                   "connections, direct and mlstream alternated request by request, "
                   f"{cfg.latency_pause_ms:g} ms pause before each request (back_to_back: none); added = "
                   "mlstream - direct, pair by pair. c=64: closed loop, the first "
                   f"{cfg.warmup} s left out.")
    return out


def _client_runs(env: Env) -> dict[str, Any]:
    """First token as a client that talks to one server sees it: every SSE event parsed,
    and each recorded request right after the same server's previous answer (two in a
    row per turn, the second recorded; the two servers still alternate turn by turn),
    so whatever a stream leaves behind lies on the next one's path. Long (200-chunk)
    and short (5-chunk) answers back to back, and long ones ``latency_pause_ms`` apart."""
    cfg = env.cfg
    out: dict[str, Any] = {"pairs": cfg.latency_client_pairs, "runs": 2, "parse_events": True}
    plans = [("long_back_to_back", cfg.latency_long_chunks, 0.0),
             ("short_back_to_back", cfg.latency_short_chunks, 0.0),
             ("long_paused", cfg.latency_long_chunks, cfg.latency_pause_ms)]
    for key, chunks, pause_ms in plans:
        model = f"gpt-fake?chunks={chunks}"
        pair = env.pair(model, max_connection=4)
        preflight(env, pair, chunks)
        targets = {side: (pair.addresses[side], pair.requests[side]) for side in SIDES}
        result = alternate(targets, cfg.latency_client_pairs, pause=pause_ms / 1000, warmup=10, timeout=300,
                           runs=2, parse_events=True)
        env.generator_runs.append({"label": f"latency client {key}", "wall": round(result.wall, 3),
                                   "cpu": round(result.cpu, 3)})
        out[key] = {"model": model, **_alternated(result.responses, True, pause_ms)}
    return out


def _latency_value(r: Response, stream: bool) -> float:
    """First token (stream) or whole answer (non-stream), from the request's first byte written."""
    return r.ttft if stream else r.t_end - r.t_write


def sides_figures(responses: dict[str, list[Response]], sides: Sequence[str], stream: bool) -> dict[str, Any]:
    """Each side's latency figures from an ``alternate`` run whose first side is direct: its
    ms, outcomes and (but direct) the time it added over direct, pair by pair."""
    values = {side: [_latency_value(r, stream) if r.ok else math.nan for r in responses[side]] for side in sides}
    figures: dict[str, Any] = {}
    for side in sides:
        outcomes = Outcomes.of(responses[side])
        figures[side] = {"ms": summarize(values[side], 1000), "ok": outcomes.ok, "total": outcomes.total,
                         "errors": outcomes.errors}
        if side != sides[0]:
            added = [v - d for d, v in zip(values[sides[0]], values[side]) if d == d and v == v]
            figures[side]["added_ms"] = summarize(added, 1000)
    return figures


def _alternated(responses: dict[str, list[Response]], stream: bool, pause_ms: float) -> dict[str, Any]:
    """Both sides' figures and the added time pair by pair (pairs where both came back whole)."""
    sides = {side: [_latency_value(r, stream) if r.ok else math.nan for r in responses[side]] for side in SIDES}
    added = [m - d for d, m in zip(sides["direct"], sides["mlstream"]) if d == d and m == m]
    entry: dict[str, Any] = {"pause_ms": pause_ms, "pairs": len(added)}
    for side in SIDES:
        out = Outcomes.of(responses[side])
        entry[side] = {"ms": summarize(sides[side], 1000), "ok": out.ok, "total": out.total, "errors": out.errors}
    entry["added_ms"] = summarize(added, 1000)
    entry["overhead_ms_p50"] = entry["added_ms"]["p50"]   # the goal's figure: median of the pairs' added time
    entry["overhead_ms_p99"] = entry["added_ms"]["p99"]
    return entry


# =========================================================================== 3. many slow streams


def accept_queue(port: int) -> int:
    """Connections waiting in the accept queue of the listener on ``port`` (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                return int(parts[4].split(":")[1], 16)
    return 0


class _Peaks:
    """Samples a server process (and its /metrics, accept queue) from the load generator's tick."""

    def __init__(self, child: Child, admin: Admin | None) -> None:
        self.child, self.admin = child, admin
        self.rss_kb = self.threads = self.accept_queue = 0
        self.active = 0
        self.rss_kb_at_active_peak = 0

    def __call__(self, now: float) -> None:
        s = self.child.sample()
        self.rss_kb = max(self.rss_kb, s.rss_kb)
        self.threads = max(self.threads, s.threads)
        self.accept_queue = max(self.accept_queue, accept_queue(self.child.address[1]))
        if self.admin is not None:
            active = int(self.admin.metrics().get("mlstream_streams_active", 0))
            if active >= self.active:
                self.active, self.rss_kb_at_active_peak = active, s.rss_kb


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    peak = level = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def _slow_run(env: Env, pair: Pair, side: str, n: int, chunks: int, delay_ms: int, ramp: float,
              server: Child, admin: Admin, label: str) -> dict[str, Any]:
    users = [User(pair.addresses[side], pair.requests[side], start=ramp * i / n, track_gaps=True)
             for i in range(n)]
    peaks = _Peaks(server, admin if side == "mlstream" else None)
    fake_peaks = _Peaks(env.fake, None)

    def tick(now: float) -> None:
        peaks(now)
        fake_peaks(now)

    before = server.sample()
    result = env.run(users, timeout=ramp + chunks * delay_ms / 1000 * 3 + 30, tick=(0.25, tick), label=label)
    outcomes = Outcomes.of(result.responses)
    gaps = [g for r in result.responses for g in (r.gaps or ())]
    ideal = (chunks - 1) * delay_ms / 1000
    stretch = [(r.t_end - r.t_first) / ideal for r in result.responses if r.ok and ideal > 0]
    gap = summarize(gaps, 1000)
    on_pace = outcomes.ok == n and gap["p99"] is not None and gap["p99"] <= 2 * delay_ms
    out = {"streams": n, "ok": outcomes.ok, "completion": round(outcomes.ok / n, 4), "errors": outcomes.errors,
           "gap_ms": gap, "ttfe_ms": summarize([r.ttfe for r in result.responses if r.ok], 1000),
           "duration_over_ideal_p99": round(percentile(stretch, 99), 3) if stretch else None,
           "on_pace": on_pace, "generator_cpu": round(result.cpu / result.wall, 3),
           # streams delivering at the same instant, as the client saw them (first event .. end)
           "streams_streaming_peak": peak_overlap([(r.t_first, r.t_end) for r in result.responses
                                                   if r.t_first == r.t_first and r.t_end == r.t_end]),
           "fake_threads_peak": fake_peaks.threads, "wall": round(result.wall, 2)}
    if side == "mlstream":
        out.update({"server_rss_kb_before": before.rss_kb, "server_rss_kb_peak": peaks.rss_kb,
                    "server_threads_peak": peaks.threads, "streams_active_peak": peaks.active,
                    "server_rss_kb_at_active_peak": peaks.rss_kb_at_active_peak,
                    "server_accept_queue_peak": peaks.accept_queue,
                    "server_cpu_seconds": round(server.sample().cpu - before.cpu, 2)})
    else:
        out["fake_accept_queue_peak"] = fake_peaks.accept_queue
    return out


def slow_streams(env: Env) -> dict[str, Any]:
    """1000 concurrent streams of 50 chunks, 100 ms apart; then the on-pace capacity at 20 ms.

    A server of its own, its pool sized for the streams (``--stream-workers`` = n + 64),
    so that its idle RSS, peak RSS and threads belong to this scenario alone.
    """
    cfg = env.cfg
    n = cfg.slow_streams
    workers = max(n, max(cfg.capacity_levels)) + 64
    server = env.procs.start_mlstream("mlstream-slow", workers=workers)
    admin = Admin(server.address)
    try:
        idle_start = server.sample()
        model = f"gpt-fake?chunks={cfg.slow_chunks}&delay_ms={cfg.slow_delay_ms}"
        pair = env.pair(model, max_connection=workers, server=server, admin=admin)
        cap_model = f"gpt-fake?chunks={cfg.capacity_chunks}&delay_ms={cfg.capacity_delay_ms}"
        cap_pair = env.pair(cap_model, max_connection=workers, server=server, admin=admin)
        time.sleep(0.2)
        idle = server.sample()
        ramp = cfg.slow_ramp
        runs: dict[str, Any] = {}
        for side in SIDES:
            runs[side] = _slow_run(env, pair, side, n, cfg.slow_chunks, cfg.slow_delay_ms, ramp, server, admin,
                                   f"slow streams {side}")
            env.settle(admin)
        ml = runs["mlstream"]
        after = server.sample()
        # Per open stream: RSS over idle when the most streams ran at once, divided by
        # how many ran then (mlstream_streams_active) — not by n, in case fewer than n
        # were ever open together.
        open_peak = max(ml["streams_active_peak"], 1)
        per_stream_kb = (ml["server_rss_kb_at_active_peak"] - idle.rss_kb) / open_peak
        slow = {"model": model, "ramp_seconds": ramp, "pool_workers": workers, **runs,
                "server_idle_rss_kb": idle.rss_kb, "server_idle_rss_kb_at_start": idle_start.rss_kb,
                "server_idle_threads": idle.threads, "server_rss_kb_after": after.rss_kb,
                "server_rss_per_stream_kb": round(per_stream_kb, 1),
                "note": "on pace = every stream complete and p99 gap between content events <= 2 x the "
                        "provider's interval; RSS per stream = (RSS - idle RSS) / streams active, sampled "
                        "every 0.25 s, at the sample with the most streams active"}
        capacity = _capacity(env, cap_pair, server, admin)
        return {"slow": slow, "capacity": capacity}
    finally:
        admin.close()
        env.procs.stop(server)


def _capacity(env: Env, pair: Pair, server: Child, admin: Admin) -> dict[str, Any]:
    """Step the concurrency up until mlstream's streams fall off pace (confirmed once)."""
    cfg = env.cfg
    limit_ms = 2 * cfg.capacity_delay_ms
    steps: list[dict[str, Any]] = []
    best = {"direct": 0, "mlstream": 0}
    failed = {"direct": False, "mlstream": False}
    for i, level in enumerate(cfg.capacity_levels):
        ramp = min(0.5, level / 1000)
        step: dict[str, Any] = {"concurrency": level}
        for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
            if failed[side] and side == "direct":
                continue  # once the direct side is off pace, the fake/generator is the limit
            run = _slow_run(env, pair, side, level, cfg.capacity_chunks, cfg.capacity_delay_ms, ramp, server,
                            admin, f"capacity {level} {side}")
            env.settle(admin)
            if side == "mlstream" and not run["on_pace"]:
                retry = _slow_run(env, pair, side, level, cfg.capacity_chunks, cfg.capacity_delay_ms, ramp,
                                  server, admin, f"capacity {level} {side} retry")
                env.settle(admin)
                run["retry"] = _brief(retry, side)
                run["on_pace"] = retry["on_pace"]
            step[side] = _brief(run, side)
            if run["on_pace"] and not failed[side]:
                best[side] = level
            else:
                failed[side] = True
        steps.append(step)
        if failed["mlstream"]:
            break
    top = cfg.capacity_levels[-1]
    return {"model": pair.model, "criterion": f"every stream complete and p99 gap <= {limit_ms} ms",
            "capacity": best, "reached_top_level": not failed["mlstream"] and best["mlstream"] == top,
            "direct_off_pace_too": failed["direct"],
            "direct_limited": failed["direct"] and best["direct"] <= best["mlstream"],
            "steps": steps}


def _brief(run: dict[str, Any], side: str) -> dict[str, Any]:
    keys = ["ok", "completion", "errors", "on_pace", "generator_cpu", "retry"]
    if side == "mlstream":
        keys += ["server_rss_kb_peak", "server_threads_peak"]
    out = {k: run[k] for k in keys if k in run}
    out["gap_ms_p99"] = run["gap_ms"]["p99"]
    out["gap_ms_max"] = run["gap_ms"]["max"]
    return out


# =========================================================================== 4. backpressure


def _tcp_queues() -> list[tuple[int, int, int]]:
    """(local port, remote port, bytes queued) of every established TCP socket (/proc/net/tcp).

    Bytes queued = send queue (written, not yet acknowledged) + receive queue
    (arrived, not yet read by the application): what the kernel holds.
    """
    out: list[tuple[int, int, int]] = []
    for parts in tcp_rows():
        if parts[3] != "01":  # ESTABLISHED only (a listener's rx_queue is its accept backlog)
            continue
        tx, rx = (int(x, 16) for x in parts[4].split(":"))
        out.append((tcp_port(parts[1]), tcp_port(parts[2]), tx + rx))
    return out


def _hop_bytes(client_port: int, fake_port: int) -> tuple[int, int]:
    """Kernel bytes on the client hop (sockets of the client's connection) and on the
    provider hop (connections to the fake that are not the client's)."""
    client = provider = 0
    for lport, rport, queued in _tcp_queues():
        if client_port in (lport, rport):
            client += queued
        elif fake_port in (lport, rport):
            provider += queued
    return client, provider


class _Stream:
    """One request over a blocking socket, read when the caller says (backpressure, cancellation)."""

    def __init__(self, address: tuple[str, int], request: Request, *, keep_body: bool = False) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = self.sock.getsockname()[1]
        self.response = Response(request, time.monotonic(), keep_body=keep_body)
        self.sock.sendall(request.payload)

    def read_until(self, done: Callable[[Response], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        r = self.response
        while not done(r) and not r.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(min(remaining, 1.0))
            try:
                data = self.sock.recv(256 * 1024)
            except socket.timeout:
                continue
            except OSError as exc:
                r.fail(type(exc).__name__, time.monotonic())
                break
            if not data:
                r.eof(time.monotonic())
                break
            r.feed(data, time.monotonic())
        return done(r)

    def close(self) -> None:
        self.sock.close()


def _answer_text(body: bytes, dialect_name: str) -> str:
    """The concatenated content of a stream body (JSON-parsed: for verification only)."""
    parts: list[str] = []
    for block in body.split(b"\n\n"):
        if not block.startswith(b"data: ") or block == b"data: [DONE]":
            continue
        event = json.loads(block[6:])
        if dialect_name == "direct":
            choices = event.get("choices") or [{}]
            content = choices[0].get("delta", {}).get("content")
        else:
            data = event["inference_results"][0]["output"][0]["dataAsMap"]
            content = None if data.get("is_last") else data.get("content")
        if isinstance(content, str):
            parts.append(content)
    return "".join(parts)


def backpressure(env: Env) -> dict[str, Any]:
    """A client that reads nothing for a while, facing a long answer.

    The provider is an in-process fake (its ``stats.bytes_written`` is the
    provider's view); mlstream is the main server. Direct, the provider can only
    get ahead of the client by the TCP buffers between them; through mlstream it
    may also fill mlstream's per-stream queue and its own socket buffers, and no
    more. Then the client resumes and the answer must arrive whole.
    """
    cfg = env.cfg
    model = f"gpt-fake?chunks={cfg.backpressure_chunks}&chunk_bytes={cfg.backpressure_chunk_bytes}"
    expected = "".join(fake_tokens(parse_scenario(model, {})))
    fake = FakeOpenAI(api_key=API_KEY).start()
    try:
        pair = env.pair(model, fake_address=(fake.host, fake.port))
        queue_chunks = env.queue_chunks
        results: dict[str, Any] = {}
        for side in SIDES:
            fake.stats.reset()
            rss0 = env.mlstream.sample().rss_kb
            stream = _Stream(pair.addresses[side], pair.requests[side], keep_body=True)
            try:
                if not stream.read_until(lambda r: r.content > 0, 15):
                    raise RuntimeError(f"backpressure {side}: no first content event")
                read_before_pause = stream.response.content
                # Paused: sample the provider's progress and the server's memory.
                t0 = time.monotonic()
                written, rss_peak, last_growth = fake.stats.bytes_written, rss0, 0.0
                while time.monotonic() - t0 < cfg.backpressure_pause:
                    time.sleep(0.05)
                    now_written = fake.stats.bytes_written
                    if now_written != written:
                        written, last_growth = now_written, time.monotonic() - t0
                    rss_peak = max(rss_peak, env.mlstream.sample().rss_kb)
                chunks_at_stall = fake.stats.chunks_written
                kernel_down, kernel_up = _hop_bytes(stream.port, fake.port)
                t_resume = time.monotonic()
                whole = stream.read_until(lambda r: r.done, 120)
                resume_seconds = time.monotonic() - t_resume
            finally:
                stream.close()
            r = stream.response
            answer_bytes = fake.stats.bytes_written
            text = _answer_text(bytes(r.body or b""), side) if r.ok else ""
            results[side] = {
                "answer_bytes": answer_bytes, "answer_chunks": cfg.backpressure_chunks,
                "provider_bytes_at_stall": written, "provider_chunks_at_stall": chunks_at_stall,
                "provider_share_at_stall": round(written / answer_bytes, 4) if answer_bytes else None,
                "provider_stalled_after_s": round(last_growth, 3),
                # blocked: the provider wrote nothing in the second half of the pause
                "provider_blocked": last_growth <= cfg.backpressure_pause / 2,
                "kernel_bytes_client_hop": kernel_down, "kernel_bytes_provider_hop": kernel_up,
                "client_events_read_before_pause": read_before_pause,
                "server_rss_kb_before": rss0, "server_rss_kb_peak": rss_peak,
                "server_rss_growth_kb": rss_peak - rss0 if side == "mlstream" else None,
                "resumed_whole": bool(whole and r.ok and r.content == cfg.backpressure_chunks and text == expected),
                "content_events": r.content, "resume_seconds": round(resume_seconds, 3),
                "client_bytes": r.nbytes,
            }
            env.settle()
        d, m = results["direct"], results["mlstream"]
        up_chunk = m["answer_bytes"] / cfg.backpressure_chunks
        down_chunk = m["client_bytes"] / cfg.backpressure_chunks
        # What mlstream holds in user space, in provider chunks: what the provider
        # wrote, less the bytes in the kernel on both hops (client-hop bytes are in
        # mlstream's format: converted to chunks by their own size) and less what
        # the client had read before it paused.
        held_chunks = (m["provider_bytes_at_stall"] - m["kernel_bytes_provider_hop"]) / up_chunk \
            - m["kernel_bytes_client_hop"] / down_chunk - m["client_events_read_before_pause"]
        allowance_chunks = queue_chunks + MAX_BATCH_EVENTS + READ_SIZE / up_chunk + 2
        return {
            "model": model, "pause_seconds": cfg.backpressure_pause, "direct": d, "mlstream": m,
            "extra_bytes_through_mlstream": m["provider_bytes_at_stall"] - d["provider_bytes_at_stall"],
            "provider_chunk_bytes": round(up_chunk, 1), "client_event_bytes": round(down_chunk, 1),
            "stream_queue_chunks": queue_chunks,
            "held_in_mlstream_chunks": round(held_chunks, 1),
            "allowance_chunks": round(allowance_chunks, 1),
            "bounded": held_chunks <= allowance_chunks and m["provider_blocked"],
            "note": "allowance = queue (--stream-queue-chunks) + one write batch (64 events) + one upstream "
                    "read (64 KiB) + the item being handed over; kernel bytes from /proc/net/tcp "
                    "(send + receive queues of the sockets on each hop) at the end of the pause",
        }
    finally:
        fake.stop()


# =========================================================================== 5. cancellation


def cancellation(env: Env) -> dict[str, Any]:
    """Clients that hang up mid-stream: disconnect -> pool worker free, and -> upstream closed.

    The provider is an in-process fake: a watcher thread waits on its
    ``stats.client_disconnects`` (woken by the fake's own condition variable) and
    timestamps the moment the provider sees its connection closed. "Worker free"
    polls mlstream's ``/metrics`` (``mlstream_streams_active`` back to 0)
    back to back on a keep-alive connection; its resolution is one poll's round
    trip, reported. The client reads a few content events, drains its socket
    and closes it (a FIN: the server learns of it at its next write).
    """
    cfg = env.cfg
    fake = FakeOpenAI(api_key=API_KEY).start()
    try:
        variants: dict[str, Any] = {}
        plans = [("paced", cfg.cancel_delay_ms, cfg.cancel_samples, 3)]
        if cfg.cancel_silent_samples:
            plans.append(("slow_provider", cfg.cancel_silent_delay_ms, cfg.cancel_silent_samples, 1))
        for name, delay_ms, samples, after_events in plans:
            model = f"gpt-fake?chunks=2000&delay_ms={delay_ms}"
            pair = env.pair(model, fake_address=(fake.host, fake.port))
            data: dict[str, dict[str, list[float]]] = {s: {"upstream_closed": [], "worker_free": []} for s in SIDES}
            poll_rtts: list[float] = []
            failures: list[str] = []
            for i in range(samples):
                for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
                    try:
                        up, free = _cancel_once(env, fake, pair, side, after_events, poll_rtts)
                    except RuntimeError as exc:
                        failures.append(f"{side}: {exc}")
                        env.settle()
                        continue
                    if up is not None:
                        data[side]["upstream_closed"].append(up)
                    if free is not None:
                        data[side]["worker_free"].append(free)
            variants[name] = {
                "model": model, "provider_interval_ms": delay_ms, "samples": samples,
                "direct": {"upstream_closed_ms": summarize(data["direct"]["upstream_closed"], 1000)},
                "mlstream": {"upstream_closed_ms": summarize(data["mlstream"]["upstream_closed"], 1000),
                             "worker_free_ms": summarize(data["mlstream"]["worker_free"], 1000)},
                "metrics_poll_rtt_ms": summarize(poll_rtts, 1000),
                "failures": failures,
            }
        return variants
    finally:
        fake.stop()


def _cancel_once(env: Env, fake: FakeOpenAI, pair: Pair, side: str, after_events: int,
                 poll_rtts: list[float]) -> tuple[float | None, float | None]:
    stats = fake.stats
    before = stats.client_disconnects
    seen: list[float] = []

    def watch() -> None:
        if stats.wait_for(lambda s: s.client_disconnects > before, timeout=10):
            seen.append(time.monotonic())

    watcher = threading.Thread(target=watch, name="bench-cancel-watch", daemon=True)
    watcher.start()
    stream = _Stream(pair.addresses[side], pair.requests[side])
    try:
        if not stream.read_until(lambda r: r.content >= after_events, 15):
            raise RuntimeError(f"no {after_events} content events ({stream.response.error})")
        stream.sock.setblocking(False)
        try:  # drain what already arrived, so that close() sends a FIN, not a reset
            for _ in range(64):
                if not stream.sock.recv(256 * 1024):
                    break
        except (BlockingIOError, InterruptedError):
            pass
    finally:
        t_close = time.monotonic()
        stream.close()
    free = None
    if side == "mlstream":
        deadline = t_close + 10
        while time.monotonic() < deadline:
            t = time.monotonic()
            active = env.admin.metrics().get("mlstream_streams_active", 0)
            t_after = time.monotonic()
            poll_rtts.append(t_after - t)
            if active == 0:
                free = t_after - t_close
                break
            time.sleep(0.0002)
    watcher.join(12)
    up = seen[0] - t_close if seen else None
    if up is None:
        raise RuntimeError("the provider never saw its connection close")
    return up, free


# =========================================================================== 6. admission


def admission(env: Env) -> dict[str, Any]:
    """A small pool whose readers are held behind; then stream requests that must be refused at once.

    Server: ``--stream-workers W --stream-backlog B``. Live streams hold no worker
    while they wait for bytes, so the pool is filled the way it overloads: W slow
    gzip-coded streams (a compressed body is read by a worker that waits on it for
    its life) hold every worker, and B + 1 plain slow streams then have their next
    slices waiting, more than the backlog. A probe client then sends requests one
    after another on one keep-alive connection: each must get 429, and its latency is
    the refusal's. The same fill runs once without probes, as the baseline the
    accepted streams are compared with. Direct counterpart: the provider's own
    refusal (the fake answering 429 at once).
    """
    cfg = env.cfg
    w, b = cfg.admission_workers, cfg.admission_backlog
    server = env.procs.start_mlstream("mlstream-admission", workers=w, backlog=b)
    admin = Admin(server.address)
    try:
        fill_model = f"gpt-fake?chunks={cfg.admission_fill_chunks}&delay_ms={cfg.admission_fill_delay_ms}"
        held = env.pair(fill_model + "&gzip=1", server=server, admin=admin)
        fill = env.pair(fill_model, server=server, admin=admin)
        probe = env.pair(fill_model, server=server, admin=admin)  # same answer: refused before any upstream call
        refuse = make_pair("gpt-fake?status=429", "-", env.fake.address, server.address, stream=True)
        fill_seconds = cfg.admission_fill_chunks * cfg.admission_fill_delay_ms / 1000
        timeout = 3 * fill_seconds + 30

        def fill_users() -> list[User]:
            return [User(pair.addresses["mlstream"], pair.requests["mlstream"], start=0.01 * i, track_gaps=True)
                    for i, pair in enumerate([held] * w + [fill] * (b + 1))]

        baseline = env.run(fill_users(), timeout=timeout, label="admission baseline")
        env.settle(admin)
        rejected0 = admin.metrics().get("mlstream_streams_rejected_total", 0)
        # Probes spread over the time the pool is full: until the W held streams end
        # (then the waiting slices run and the backlog has room again).
        probe_start = 0.01 * (w + b + 1) + 0.3
        probe_end = 0.75 * fill_seconds
        think = max(0.0, 0.6 * (probe_end - probe_start) / cfg.admission_probes)
        users = fill_users() + [User(probe.addresses["mlstream"], probe.requests["mlstream"],
                                     count=cfg.admission_probes, start=probe_start, think=think,
                                     stop_issuing=probe_end)]
        loaded = env.run(users, timeout=timeout, label="admission with probes")
        rejected = admin.metrics().get("mlstream_streams_rejected_total", 0) - rejected0
        env.settle(admin)
        direct = env.run([User(refuse.addresses["direct"], refuse.requests["direct"], count=10)], timeout=30,
                         label="admission direct warm-up")
        direct = env.run([User(refuse.addresses["direct"], refuse.requests["direct"], count=cfg.admission_probes)],
                         timeout=60, label="admission direct 429")
        probes = [r for r in loaded.responses if r.request is probe.requests["mlstream"]]
        fills = [r for r in loaded.responses if r.request in (fill.requests["mlstream"], held.requests["mlstream"])]
        refused = [r for r in probes if r.status == 429]

        def fill_summary(responses: list[Response]) -> dict[str, Any]:
            out = Outcomes.of(responses)
            return {"ok": out.ok, "total": out.total, "errors": out.errors,
                    "gap_ms": summarize([g for r in responses for g in (r.gaps or ())], 1000),
                    "content_events": sum(r.content for r in responses)}

        return {
            "workers": w, "backlog": b, "fill_model": fill_model,
            "mlstream": {"probes": len(probes), "refused_429": len(refused),
                         "other_statuses": Outcomes.of(probes).statuses,
                         "rejected_total_delta": rejected,
                         "refusal_ms": summarize([r.latency for r in refused], 1000)},
            "direct": {"probes": len(direct.responses),
                       "refused_429": sum(r.status == 429 for r in direct.responses),
                       "refusal_ms": summarize([r.latency for r in direct.responses if r.status == 429], 1000)},
            "accepted_baseline": fill_summary(baseline.responses),
            "accepted_with_probes": fill_summary(fills),
            "expected_content_events": (w + b + 1) * cfg.admission_fill_chunks,
            "probe_interval_ms": round(think * 1000, 2),
            "note": "refusal latency: request sent -> whole 429 response received, one keep-alive connection, "
                    "probes spread over the time the pool is full; direct = the fake provider answering 429 "
                    "itself (back to back)",
        }
    finally:
        admin.close()
        env.procs.stop(server)


# =========================================================================== 7. keep-alive churn soak


class ScenarioFailed(RuntimeError):
    """A scenario ran and its figures show a failure; ``figures`` still go into the JSON."""

    def __init__(self, message: str, figures: dict[str, Any]) -> None:
        super().__init__(message)
        self.figures = figures


@dataclass(frozen=True)
class ChurnKind:
    """One kind of client in the soak: ``clients`` of them, each looping on one request."""

    name: str
    clients: int
    model: str = ""                   # the fake answer ("" for a GET)
    stream: bool = True
    path: str = ""                    # a GET: "healthz" or "model"
    pipeline_after: int | None = None
    hangup_after: int = 0
    pair_pause: float = 0.0           # > 0: two requests back to back, then this many seconds idle
    what: str = ""


# What a client does, and why it is here. Each loops on one keep-alive connection until
# the soak ends, back to back unless said otherwise; hang-up clients reconnect.
CHURN_MIX: tuple[ChurnKind, ...] = (
    ChurnKind("fast", 8, "gpt-fake?chunks=200",
              what="200-chunk answers, no delay; the next request written the moment the last chunk arrived"),
    ChurnKind("fast_pipelined", 4, "gpt-fake?chunks=200", pipeline_after=1,
              what="as fast, but the next request written once the first content event arrived "
                   "(on the socket long before the last chunk)"),
    ChurnKind("short", 4, "gpt-fake?chunks=5",
              what="5-chunk answers back to back: the most stream ends (and next requests) per second"),
    ChurnKind("paired", 160, "gpt-fake?chunks=5", pair_pause=2.0,
              what="two 5-chunk answers back to back (the second request written the moment the first "
                   "answer ended), then 2 s idle on the kept-alive connection"),
    ChurnKind("paced", 6, "gpt-fake?chunks=50&delay_ms=20", what="50 chunks 20 ms apart (1 s), back to back"),
    ChurnKind("paced_pipelined", 2, "gpt-fake?chunks=50&delay_ms=20", pipeline_after=48,
              what="as paced, the next request written at the 48th of 50 content events (~40 ms before the end)"),
    ChurnKind("hangup", 4, "gpt-fake?chunks=200&delay_ms=10", hangup_after=3,
              what="read 3 content events, close (a FIN and a reset in turn), reconnect"),
    ChurnKind("predict", 2, "gpt-fake?chunks=10", stream=False, what="non-stream _predict back to back"),
    ChurnKind("get_healthz", 1, path="healthz", what="GET /healthz back to back"),
    ChurnKind("get_model", 1, path="model", what="GET of a model back to back"),
)
CHURN_SETTLE_SECONDS = 15.0     # longest wait for threads and descriptors to stop changing
DIRECT_SAMPLES = 4              # direct measurements per kind (the expected time is their median)


def _paced_seconds(model: str, until: int | None = None) -> float:
    """How long the fake takes, by its pacing alone, to send ``until`` content events (all by default)."""
    scenario = parse_scenario(model, {})
    chunks = len(fake_tokens(scenario)) if until is None else until
    return max(chunks - 1, 0) * scenario.delay_ms / 1000


def _quiet(server: Child, admin: Admin, upstream_port: int) -> tuple[ProcSample, dict[str, int], bool]:
    """Wait (bounded) until mlstream runs no stream and its threads and descriptors stop
    changing for 0.5 s; then sample them. False when they did not settle in time."""
    deadline = time.monotonic() + CHURN_SETTLE_SECONDS
    last: tuple[int, int] | None = None
    stable_since = time.monotonic()
    while True:
        m = admin.metrics()   # also keeps the admin connection (and its handler thread) alive
        sample, fds = server.sample(), server.fds(upstream_port)
        now = time.monotonic()
        busy = m.get("mlstream_streams_active", 0) or m.get("mlstream_streams_queued", 0)
        key = (sample.threads, fds["total"])
        if busy or key != last:
            last, stable_since = key, now
        elif now - stable_since >= 0.5:
            return sample, fds, True
        if now >= deadline:
            return sample, fds, False
        time.sleep(0.1)


def churn(env: Env) -> dict[str, Any]:
    """Keep-alive churn soak: the clients of :data:`CHURN_MIX` at once for ``churn_seconds``; fails on a freeze.

    A server of its own (``--stream-workers 256``), the main fake provider. It
    fails (raises :class:`ScenarioFailed`: the run exits 1, the figures stay in
    the JSON) when:

    - any request fails: connection error, status other than 200, in-band error
      event, framing not complete, end marker missing, fewer content events than
      the answer has (hang-up clients: their events before they hung up);
    - any request takes more than ``churn_slow_factor`` x its expected time:
      the same request measured alone, directly against the fake, in this run
      (median of DIRECT_SAMPLES), or the fake's pacing if longer, and at least
      ``churn_floor_ms``. The floor is not the request's own time but the soak's:
      ~190 clients keep mlstream at ~90 % of a core, so a 200-chunk answer that
      takes 3-8 ms alone takes ~100 ms (p50) inside the soak, and up to ~350 ms
      on a 2-core machine with a little other work, ~850 ms with a load average
      of 6; 5 x 400 ms = 2 s stays clear of that. (A server-wide freeze is
      caught sooner, by the start gap below.);
    - the server goes ``churn_max_start_gap`` s without starting an answer to
      a stream request (its response head), or ``churn_max_stall`` s without
      completing any request;
    - after the soak, once settled, its threads or file descriptors exceed
      those before it (after a warm-up that opened as many streams at once as
      the soak can: the reader pool and the upstream connection pool grow once
      and stay) by more than a small tolerance, a client connection is still
      open, or its RSS grew by more than ``churn_rss_growth_mb``.

    The freeze it is built to catch (the hang-up watcher peeking a socket under
    its lock after a stale readiness event) lasts until the client whose socket
    it peeks sends again or closes: the "paired" clients, idle 2 s after a
    request written the moment the previous answer ended, make it last 2 s.
    """
    cfg = env.cfg
    streaming = sum(k.clients for k in CHURN_MIX if k.stream and not k.path)
    hangups = sum(k.clients for k in CHURN_MIX if k.hangup_after)
    # Warm-up burst: more streams at once than the soak can ever have open (every streaming
    # client's, plus hang-ups whose stream is still being cancelled), so that the reader pool's
    # threads and the upstream pool's connections exist before the "before" sample.
    burst = streaming + 2 * hangups + 8
    workers = 256
    server = env.procs.start_mlstream("mlstream-churn", workers=workers)
    admin = Admin(server.address)
    fake_port = env.fake.address[1]
    try:
        requests: dict[str, dict[str, Request]] = {}
        pairs: dict[tuple[str, bool], Pair] = {}
        for kind in CHURN_MIX:
            if kind.path:
                continue
            key = (kind.model, kind.stream)
            if key not in pairs:
                pairs[key] = env.pair(kind.model, stream=kind.stream, max_connection=burst, server=server,
                                      admin=admin)
            requests[kind.name] = {side: Request(req.payload, req.dialect, req.stream, kind.name)
                                   for side, req in pairs[key].requests.items()}
        any_model = next(iter(pairs.values())).model_id
        for kind in CHURN_MIX:
            if kind.path:
                path = "/healthz" if kind.path == "healthz" else f"/_plugins/_ml/models/{any_model}"
                requests[kind.name] = {"mlstream": Request(build_get(server.address, path), PLAIN, False, kind.name)}

        # Expected time of each kind: the same request directly against the fake (median of
        # DIRECT_SAMPLES, each connection's first answer left out). The kinds run side by side,
        # each on connections of its own; a paced kind on several connections at once (one
        # sample each) so that this takes about one paced answer's time.
        direct_ms: dict[str, float | None] = {kind.name: None for kind in CHURN_MIX}
        direct_users: list[User] = []
        for kind in CHURN_MIX:
            req = requests[kind.name].get("direct")
            if req is None:
                continue
            per_connection = 1 + DIRECT_SAMPLES if _paced_seconds(kind.model) < 0.2 else 2
            for j in range(DIRECT_SAMPLES // (per_connection - 1)):
                labelled = Request(req.payload, req.dialect, req.stream, f"{kind.name}/{j}")
                direct_users.append(User(env.fake.address, labelled, count=per_connection,
                                         hangup_after=kind.hangup_after))
        result = env.run(direct_users, timeout=60, label="churn direct")
        for kind in CHURN_MIX:
            if "direct" not in requests[kind.name]:
                continue
            times: list[float] = []
            errors: dict[str, int] = {}
            for user in direct_users:
                if user.request.label.split("/")[0] != kind.name:
                    continue
                responses = result.by_label(user.request.label)
                times += [r.t_end - r.t_turn for r in responses[1:] if r.ok or r.hung_up]
                errors.update(Outcomes.of(responses).errors)
            if len(times) < DIRECT_SAMPLES:
                raise RuntimeError(f"churn: {kind.name} directly against the fake failed: {errors}")
            direct_ms[kind.name] = round(percentile(times, 50) * 1000, 3)
        expected_ms: dict[str, float] = {}
        for kind in CHURN_MIX:
            paced = _paced_seconds(kind.model, kind.hangup_after or None) * 1000 if kind.model else 0.0
            expected_ms[kind.name] = round(max(direct_ms[kind.name] or 0.0, paced, cfg.churn_floor_ms), 3)

        def users(seconds: float) -> list[User]:
            out: list[User] = []
            for kind in CHURN_MIX:
                req = requests[kind.name]["mlstream"]
                for i in range(kind.clients):
                    # started 5 ms apart; pairs spread over their pause, so that they do not move in step
                    start = 0.005 * len(out) + kind.pair_pause * i / kind.clients
                    out.append(User(server.address, req, count=10**9, start=start, stop_issuing=seconds,
                                    pipeline_after=kind.pipeline_after, hangup_after=kind.hangup_after,
                                    think=kind.pair_pause, burst=2, track_gaps=kind.name.startswith("paced")))
            return out

        # Warm-up: the burst, then every kind of client for a moment; then let it settle.
        burst_req = Request(requests["paced"]["mlstream"].payload, MLSTREAM, True, "burst")
        warm = env.run([User(server.address, burst_req) for _ in range(burst)], timeout=60, label="churn warm-up burst")
        warm_mix = env.run(users(cfg.churn_warmup), timeout=cfg.churn_warmup + 30, label="churn warm-up mix")
        warm_out = Outcomes.of([r for r in warm.responses + warm_mix.responses if not r.hung_up])
        before, fds_before, settled_before = _quiet(server, admin, fake_port)

        # The soak.
        peaks = {"threads": before.threads, "fds": fds_before["total"], "rss_kb": before.rss_kb}

        def tick(now: float) -> None:
            s = server.sample()
            peaks["threads"] = max(peaks["threads"], s.threads)
            peaks["rss_kb"] = max(peaks["rss_kb"], s.rss_kb)
            try:
                peaks["fds"] = max(peaks["fds"], len(os.listdir(f"/proc/{server.pid}/fd")))
            except OSError:
                pass

        soak_users = users(cfg.churn_seconds)
        # Bounded: long enough for the last paced answers, far shorter than a 30-60 s freeze.
        timeout = cfg.churn_seconds + 5 * max(expected_ms.values()) / 1000 + 10
        cpu0 = server.sample().cpu
        t_run = time.monotonic()
        result = env.run(soak_users, timeout=timeout, tick=(0.5, tick), label="churn soak")
        cpu = server.sample().cpu - cpu0
        settled = env.settle(admin)
        after, fds_after, settled_after = _quiet(server, admin, fake_port)

        figures = _churn_figures(cfg, result, t_run, expected_ms, direct_ms)
        problems: list[str] = list(figures.pop("problems"))
        thread_growth = after.threads - before.threads
        fd_growth = fds_after["total"] - fds_before["total"]
        rss_growth_kb = after.rss_kb - before.rss_kb
        if thread_growth > cfg.churn_thread_tolerance:
            problems.append(f"threads grew {before.threads} -> {after.threads} (tolerance "
                            f"+{cfg.churn_thread_tolerance})")
        if fd_growth > cfg.churn_fd_tolerance:
            problems.append(f"open file descriptors grew {fds_before} -> {fds_after} (tolerance "
                            f"+{cfg.churn_fd_tolerance})")
        if fds_after["clients"] > 1:   # the admin connection
            problems.append(f"{fds_after['clients']} client connections still open after the soak")
        if rss_growth_kb > cfg.churn_rss_growth_mb * 1024:
            problems.append(f"RSS grew {before.rss_kb / 1024:.1f} -> {after.rss_kb / 1024:.1f} MB "
                            f"(bound +{cfg.churn_rss_growth_mb} MB)")
        if warm_out.errors:
            problems.append(f"warm-up: {warm_out.total - warm_out.ok} of {warm_out.total} failed ({warm_out.errors})")
        if not settled_before or not settled or not settled_after:
            problems.append("mlstream did not settle before or after the soak (streams still active, or "
                            f"threads/fds still changing after {CHURN_SETTLE_SECONDS:.0f} s)")
        figures.update({
            "seconds": cfg.churn_seconds, "server_workers": workers, "clients": len(soak_users),
            "mix": [{"kind": k.name, "clients": k.clients, "model": k.model or None, "what": k.what}
                    for k in CHURN_MIX],
            "warmup": {"burst_streams": burst, "mix_seconds": cfg.churn_warmup, "ok": warm_out.ok,
                       "total": warm_out.total, "errors": warm_out.errors, "settled": settled_before},
            "server": {"threads_before": before.threads, "threads_after": after.threads,
                       "threads_peak": peaks["threads"], "thread_growth": thread_growth,
                       "fds_before": fds_before, "fds_after": fds_after, "fds_peak": peaks["fds"],
                       "fd_growth": fd_growth,
                       "rss_kb_before": before.rss_kb, "rss_kb_after": after.rss_kb, "rss_kb_peak": peaks["rss_kb"],
                       "rss_growth_kb": rss_growth_kb,
                       "cpu_share": round(cpu / result.wall, 3) if result.wall else None,
                       "settled": settled and settled_after},
            "limits": {"slow_factor": cfg.churn_slow_factor, "floor_ms": cfg.churn_floor_ms,
                       "max_stall_s": cfg.churn_max_stall, "max_start_gap_s": cfg.churn_max_start_gap,
                       "thread_tolerance": cfg.churn_thread_tolerance,
                       "fd_tolerance": cfg.churn_fd_tolerance, "rss_growth_mb": cfg.churn_rss_growth_mb},
            "generator_cpu": round(result.cpu / result.wall, 3) if result.wall else None,
            "problems": problems,
            "passed": not problems,
            "note": f"expected = max(the same request alone, directly against the fake (median of {DIRECT_SAMPLES}), "
                    "the fake's pacing, the floor); a request's time runs from when its turn came (sent, or "
                    "the answer before it on a pipelined connection ended) to its last byte (hang-ups: to the "
                    "event they hung up at). Start gap = longest time in which no stream request got its "
                    "response head; stall = longest time in which no request completed (hang-ups count when "
                    "they got their events); both inside the time requests were issued. Threads and fds "
                    f"compared after a warm-up burst of {burst} streams and after the soak, each once they "
                    "stopped changing.",
        })
        if problems:
            raise ScenarioFailed("churn soak failed: " + "; ".join(problems[:6])
                                 + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""), figures)
        return figures
    finally:
        admin.close()
        env.procs.stop(server)


def _churn_figures(cfg: Config, result: RunResult, t_run: float, expected_ms: dict[str, float],
                   direct_ms: dict[str, float | None]) -> dict[str, Any]:
    """Per kind: requests, errors, times against expected; the longest stall; what failed."""
    problems: list[str] = []
    kinds: dict[str, Any] = {}
    completions: list[float] = []
    slow_examples: list[str] = []
    for kind in CHURN_MIX:
        responses = result.by_label(kind.name)
        chunks = expected_chunks(kind.model) if kind.model and kind.stream else None
        good: list[Response] = []
        errors: dict[str, int] = {}
        for r in responses:
            reason = _churn_error(r, kind, chunks)
            if reason is None:
                good.append(r)
                completions.append(r.t_end)
            else:
                errors[reason] = errors.get(reason, 0) + 1
        limit = cfg.churn_slow_factor * expected_ms[kind.name] / 1000
        times = [r.t_end - r.t_turn for r in good]
        slow = [t for t in times if t > limit]
        entry: dict[str, Any] = {
            "clients": kind.clients, "requests": len(responses), "ok": len(good), "errors": errors,
            "per_s": round(len(good) / cfg.churn_seconds, 1),
            "direct_alone_ms": direct_ms[kind.name], "expected_ms": expected_ms[kind.name],
            "limit_ms": round(limit * 1000, 1), "ms": summarize(times, 1000),
            "worst_over_expected": round(max(times) * 1000 / expected_ms[kind.name], 2) if times else None,
            "slow": len(slow),
        }
        if kind.name.startswith("paced"):
            entry["gap_ms"] = summarize([g for r in good for g in (r.gaps or ())], 1000)
        kinds[kind.name] = entry
        if errors:
            problems.append(f"{kind.name}: {sum(errors.values())} of {len(responses)} failed ({errors})")
        if slow:
            problems.append(f"{kind.name}: {len(slow)} requests over {cfg.churn_slow_factor} x expected "
                            f"({limit * 1000:.0f} ms), the slowest {max(slow):.2f} s")
            worst = max(good, key=lambda r: r.t_end - r.t_turn)
            slow_examples.append(f"{kind.name}: {worst.t_end - worst.t_turn:.3f} s from +{worst.t_turn - t_run:.2f} s")
        if not good:
            problems.append(f"{kind.name}: no request completed")
    # Inside the time requests were issued: after it, the paced answers still running end on
    # their own time (a freeze then shows as slow or unanswered requests).
    ends = [r.t_end for r in result.responses if r.t_end == r.t_end]
    window_end = min(max(ends) if ends else t_run, t_run + cfg.churn_seconds)
    stall, stall_at = _longest_gap(completions, t_run, window_end)
    # New work: the response heads of stream requests (mlstream writes one once the provider
    # answered, after the stream was set up). Requests that finish meanwhile do not hide a freeze
    # of stream set-up the way completions do (GETs, _predict and streams already past set-up
    # still complete during one).
    heads = [r.t_head for r in result.responses if r.request.stream and r.t_head == r.t_head]
    start_gap, start_gap_at = _longest_gap(heads, t_run, window_end)
    if stall > cfg.churn_max_stall:
        problems.append(f"for {stall:.2f} s (from +{stall_at:.2f} s) the server completed no request")
    if start_gap > cfg.churn_max_start_gap:
        problems.append(f"for {start_gap:.2f} s (from +{start_gap_at:.2f} s) the server started answering "
                        "no stream request")
    if result.timed_out:
        problems.append(f"{result.timed_out} requests still unanswered when the run's time was up")
    total = sum(k["requests"] for k in kinds.values())
    ok = sum(k["ok"] for k in kinds.values())
    return {"kinds": kinds, "requests": total, "ok": ok, "errors": total - ok,
            "requests_per_s": round(ok / cfg.churn_seconds, 1), "connects": result.connects,
            "longest_stall_s": round(stall, 3), "longest_stall_at_s": round(stall_at, 2),
            "longest_start_gap_s": round(start_gap, 3), "longest_start_gap_at_s": round(start_gap_at, 2),
            "timed_out": result.timed_out, "slow_examples": slow_examples, "wall": round(result.wall, 2),
            "problems": problems}


def _longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest interval in [start, end] holding none of ``times``, and where it began (s after start)."""
    points = sorted([start] + [t for t in times if start <= t <= end] + [end])
    gap, at = 0.0, 0.0
    for a, b in zip(points, points[1:]):
        if b - a > gap:
            gap, at = b - a, a - start
    return gap, at


def _churn_error(r: Response, kind: ChurnKind, chunks: int | None) -> str | None:
    """Why one soak response is not what it should be, or None."""
    if r.error is not None:
        return r.error
    if r.status != 200:
        return f"status {r.status}"
    if r.failed:
        return "in-band error event"
    if kind.hangup_after:
        return None if r.hung_up or r.ok else "no end marker"
    if not r.complete:
        return "incomplete framing"
    if not r.ended:
        return "no end marker"
    if chunks is not None and r.content != chunks:
        return f"{r.content} content events of {chunks}"
    return None


# --------------------------------------------------------------------------- helpers


def _merge(dicts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _mean(values: Any) -> float | None:
    data = [v for v in values if v is not None and v == v]
    return round(sum(data) / len(data), 3) if data else None


# =========================================================================== 8. embedding _predict

EMBEDDING_DIMENSIONS = 1536      # the fake's default, as text-embedding-ada-002's


def embedding_predict(env: Env) -> dict[str, Any]:
    """An OpenAI embedding model (ml-commons' blueprint: openai.embedding pre- and post-process
    functions) asked for 1, 16 and 256 documents per call through ``_predict`` with
    ``text_docs``, against the same documents sent to the fake's ``/v1/embeddings``
    directly; 1,536 floats per document. Concurrency 1, alternated request by request
    (:func:`bench.loadgen.alternate`), ``latency_pause_ms`` apart; the added time is
    taken pair by pair, from the request's first byte written to the whole answer read.

    ``post_process_profile``: the steps of one 256-document answer timed in this process
    (best of 5): decoding the provider's JSON, the post-process function, encoding the
    tensors, with the JSON codec mlstream uses (``speedups``) and with the stdlib's; and
    the same answer through a Painless post-process script that prints each vector into
    the tensors' JSON (``OPENAI_EMBEDDING_POST``): the whole step (decoding the answer,
    running the script, reading its JSON) and the script's run alone (as the step runs it,
    the vectors left unprinted, and with its String printed whole); and the tutorial's
    script that loops over every float (``QUANTIZED_POST``, best of 2), whole step; its
    run alone, translated to Python (``painless.pysource``) and by the closures it replaced
    (best of 1), and the whole step over int8 values, the tutorial's own case.

    ``script_vs_builtin``: 256 documents end to end through the built-in post-process
    function and through the Painless script (:func:`script_vs_builtin`).
    """
    cfg = env.cfg
    model_id = register_connector(env.admin, openai_embedding_connector(env.fake.address), "bench embeddings")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    out: dict[str, Any] = {"dimensions": EMBEDDING_DIMENSIONS, "pause_ms": cfg.latency_pause_ms, "docs": {}}
    for n in cfg.embedding_docs:
        docs = [f"bench document {i}: the quick brown fox jumps over the lazy dog" for i in range(n)]
        requests = {
            "direct": build_request(env.fake.address, "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": docs},
                                    dialect=PLAIN, stream=False, headers=auth, label="direct"),
            "mlstream": build_request(env.mlstream.address, f"/_plugins/_ml/models/{model_id}/_predict",
                                      {"text_docs": docs}, dialect=PLAIN, stream=False, label="mlstream"),
        }
        answer = env.admin.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"text_docs": docs})
        tensors = answer["inference_results"][0]["output"]
        if len(tensors) != n or tensors[0]["shape"] != [EMBEDDING_DIMENSIONS]:
            raise RuntimeError(f"preflight embeddings: {len(tensors)} tensors for {n} documents")
        targets = {"direct": (env.fake.address, requests["direct"]),
                   "mlstream": (env.mlstream.address, requests["mlstream"])}
        result = alternate(targets, cfg.embedding_pairs, pause=cfg.latency_pause_ms / 1000, warmup=5, timeout=600)
        env.generator_runs.append({"label": f"embeddings {n} docs", "wall": round(result.wall, 3),
                                   "cpu": round(result.cpu, 3)})
        entry = _alternated(result.responses, False, cfg.latency_pause_ms)
        entry["response_bytes"] = {side: result.responses[side][0].nbytes if result.responses[side] else None
                                   for side in SIDES}
        out["docs"][str(n)] = entry
    out["script_vs_builtin"] = script_vs_builtin(env, model_id, cfg.post_process_docs)
    out["post_process_profile"] = post_process_profile(cfg.post_process_docs, cfg.post_process_repeat)
    return out


SCRIPT_SIDES = ("direct", "builtin", "script")
SCRIPT_GOAL = 1.25   # the script path's p50 total over the built-in path's: "does not dominate"


def script_vs_builtin(env: Env, builtin_id: str, n: int) -> dict[str, Any]:
    """The same n-document ``_predict`` through the blueprint's connector (built-in
    ``connector.post_process.openai.embedding``) and through one whose post-process function
    is the Painless script ``OPENAI_EMBEDDING_POST``, with the direct request for scale:
    concurrency 1, the three alternated request by request, ``latency_pause_ms`` apart.
    The goal's figure is the script path's p50 total over the built-in path's."""
    cfg = env.cfg
    connector = openai_embedding_connector(env.fake.address)
    connector["actions"][0]["post_process_function"] = OPENAI_EMBEDDING_POST
    script_id = register_connector(env.admin, connector, "bench embeddings, Painless post-process")
    docs = [f"bench document {i}: the quick brown fox jumps over the lazy dog" for i in range(n)]
    answers = [env.admin.ok("POST", f"/_plugins/_ml/models/{model}/_predict", {"text_docs": docs})
               for model in (builtin_id, script_id)]
    if answers[0] != answers[1]:
        raise RuntimeError("preflight embeddings: the Painless script's answer differs from the built-in one")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    targets = {
        "direct": (env.fake.address, build_request(env.fake.address, "/v1/embeddings",
                                                   {"model": EMBEDDING_MODEL, "input": docs}, dialect=PLAIN,
                                                   stream=False, headers=auth, label="direct")),
        **{side: (env.mlstream.address, build_request(env.mlstream.address, f"/_plugins/_ml/models/{model}/_predict",
                                                      {"text_docs": docs}, dialect=PLAIN, stream=False, label=side))
           for side, model in (("builtin", builtin_id), ("script", script_id))},
    }
    result = alternate(targets, cfg.embedding_pairs, pause=cfg.latency_pause_ms / 1000, warmup=5, timeout=600)
    env.generator_runs.append({"label": f"embeddings {n} docs, script vs built-in", "wall": round(result.wall, 3),
                               "cpu": round(result.cpu, 3)})
    values = {side: [r.t_end - r.t_write if r.ok else math.nan for r in result.responses[side]]
              for side in SCRIPT_SIDES}
    out: dict[str, Any] = {"docs": n, "pause_ms": cfg.latency_pause_ms, "goal": SCRIPT_GOAL}
    for side in SCRIPT_SIDES:
        outcomes = Outcomes.of(result.responses[side])
        out[side] = {"ms": summarize(values[side], 1000), "ok": outcomes.ok, "total": outcomes.total,
                     "errors": outcomes.errors}
    added = [v - b for b, v in zip(values["builtin"], values["script"]) if not (math.isnan(b) or math.isnan(v))]
    out["script_added_ms"] = summarize(added, 1000)
    out["script_over_builtin_p50"] = ratio(out["script"]["ms"]["p50"], out["builtin"]["ms"]["p50"])
    return out


def post_process_profile(n: int, repeat: int = 5) -> dict[str, Any]:
    """Milliseconds (best of ``repeat``) of each step mlstream takes on one n-document answer."""
    docs = [f"profile document {i}" for i in range(n)]
    payload = openai_embeddings({"input": docs}, EMBEDDING_MODEL)
    function = "connector.post_process.openai.embedding"

    def best(step: Callable[[], Any], times_run: int = repeat) -> tuple[Any, float]:
        times = []
        value = None
        for _ in range(times_run):
            start = time.perf_counter()
            value = step()
            times.append(time.perf_counter() - start)
        return value, round(min(times) * 1000, 3)

    answer, decode = best(lambda: speedups.loads_json(payload))
    tensors, post = best(lambda: processing.post_process(function, answer, None))
    body = {"inference_results": [{"output": tensors, "status_code": 200}]}
    encoded, encode = best(lambda: speedups.dumps_json(body))
    _, stdlib_decode = best(lambda: json.loads(payload))
    _, stdlib_encode = best(lambda: json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
    script_tensors, painless = best(lambda: processing.post_process_script(OPENAI_EMBEDDING_POST, {}, payload))
    if script_tensors != tensors:
        raise RuntimeError("the Painless post-process script's tensors differ from the built-in function's")
    script = compile_script(OPENAI_EMBEDDING_POST)
    _, painless_run = best(lambda: script.run(answer, lazy=True))
    _, painless_run_printed = best(lambda: script.run(answer))
    # the tutorial's loop over every float (semantic_search_with_byte_quantized_vector.md)
    floats_payload = speedups.dumps_json({"embeddings": {"float": [item["embedding"] for item in answer["data"]]}})
    loops = min(2, repeat)
    loop_tensors, loop = best(lambda: processing.post_process_script(QUANTIZED_POST, {}, floats_payload), loops)
    if [len(t["data"]) for t in loop_tensors] != [EMBEDDING_DIMENSIONS] * n:
        raise RuntimeError("the per-float Painless script's tensors have the wrong shape")
    # the same loop run by the closures (the interpreter the translation replaced), and
    # over int8 values, the tutorial's own case (Cohere's embedding_types: ["int8"])
    floats = speedups.loads_json(floats_payload)
    loop_script = compile_script(QUANTIZED_POST)
    closures = Script(QUANTIZED_POST, compile_program(parse(QUANTIZED_POST), BUILTINS))
    _, loop_run = best(lambda: loop_script.run(floats), loops)
    _, loop_run_closures = best(lambda: closures.run(floats), 1)
    ints = [[(i * 31 + j) % 256 - 128 for j in range(EMBEDDING_DIMENSIONS)] for i in range(n)]
    int8_payload = speedups.dumps_json({"embeddings": {"int8": ints}})
    int8_tensors, int8_loop = best(lambda: processing.post_process_script(QUANTIZED_POST, {}, int8_payload), loops)
    if int8_tensors[-1]["data"] != ints[-1]:
        raise RuntimeError("the per-number Painless script's int8 tensors differ from the answer")
    return {"docs": n, "dimensions": EMBEDDING_DIMENSIONS, "upstream_bytes": len(payload), "answer_bytes": len(encoded),
            "codec": "orjson" if speedups.orjson is not None else "stdlib",
            "decode_ms": decode, "post_process_ms": post, "encode_ms": encode,
            "stdlib_decode_ms": stdlib_decode, "stdlib_encode_ms": stdlib_encode,
            "painless_post_process_ms": painless, "painless_script_run_ms": painless_run,
            "painless_script_run_printed_ms": painless_run_printed, "painless_float_loop_ms": loop,
            "painless_float_loop_run_ms": loop_run, "painless_float_loop_run_closures_ms": loop_run_closures,
            "painless_int8_loop_ms": int8_loop, "numbers": n * EMBEDDING_DIMENSIONS}


# =========================================================================== 9. provider relay


@dataclass(frozen=True)
class ProviderBench:
    """One added provider: its fake's process, the connector a user would write at it, the
    direct streaming request, and how the loadgen recognises its events."""

    name: str
    interface: str
    module: str
    args: tuple[str, ...]
    connector: Callable[[str, dict[str, Any]], dict[str, Any]]     # (fake URL, knobs) -> connector
    direct: Callable[[tuple[str, int], dict[str, Any]], tuple[str, dict[str, Any], dict[str, str]]]
    dialect: Dialect


ANTHROPIC_KEY, GEMINI_KEY = "sk-ant-bench", "AIzaBench"
SAGEMAKER_KEYS = ("AKIDBENCHSAGEMAKER", "bench-sagemaker-secret")
BENCH_PROMPT = "Who is Hamlet?"


def _anthropic_direct(address: tuple[str, int], knobs: dict[str, Any]):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": True, "fake": knobs,
            "messages": [{"role": "user", "content": BENCH_PROMPT}]}
    return "/v1/messages", body, {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}


def _gemini_direct(address: tuple[str, int], knobs: dict[str, Any]):
    body = {"contents": [{"role": "user", "parts": [{"text": BENCH_PROMPT}]}], "fake": knobs}
    return ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", body,
            {"x-goog-api-key": GEMINI_KEY})


def _sagemaker_direct(address: tuple[str, int], knobs: dict[str, Any]):
    """InvokeEndpointWithResponseStream, SigV4-signed once (the fake allows 5 minutes of skew)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    path = "/endpoints/hamlet-llm/invocations-response-stream"
    body = {"inputs": BENCH_PROMPT, "parameters": {"max_new_tokens": 512, "details": True}, "stream": True,
            "fake": knobs}
    data = json.dumps(body, separators=(",", ":")).encode()
    request = AWSRequest("POST", f"http://{address[0]}:{address[1]}{path}", data=data,
                         headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(*SAGEMAKER_KEYS), "sagemaker", "us-east-1").add_auth(request)
    headers = {name: value for name, value in request.headers.items() if name.lower() != "content-type"}
    return path, body, headers


def _sagemaker_bench(container: str, separator: bytes) -> ProviderBench:
    from mlstream.testing import fake_sagemaker

    return ProviderBench(
        f"sagemaker-{container}", f"sagemaker/{container}", "mlstream.testing.fake_sagemaker",
        ("--container", container, "--access-key", SAGEMAKER_KEYS[0], "--secret-key", SAGEMAKER_KEYS[1]),
        lambda url, knobs: fake_sagemaker.connector(url, *SAGEMAKER_KEYS, **knobs), _sagemaker_direct,
        # every token's object but the last has "generated_text":null; the last repeats the answer
        Dialect(f"sagemaker-{container}", b'"generated_text":null', b'"generated_text":"', separator=separator,
                eventstream=True))


def provider_benches() -> list[ProviderBench]:
    from mlstream.testing import fake_anthropic, fake_gemini

    return [
        ProviderBench("anthropic", "anthropic/v1/messages", "mlstream.testing.fake_anthropic",
                      ("--api-key", ANTHROPIC_KEY),
                      lambda url, knobs: fake_anthropic.connector(url, ANTHROPIC_KEY, **knobs), _anthropic_direct,
                      Dialect("anthropic", b'"type":"text_delta"', b"event: message_stop")),
        ProviderBench("gemini", "gemini/v1beta/generatecontent", "mlstream.testing.fake_gemini",
                      ("--api-key", GEMINI_KEY),
                      lambda url, knobs: fake_gemini.connector(url, GEMINI_KEY, **knobs), _gemini_direct,
                      # text events end their candidate with "index":0}], the last with a finishReason
                      Dialect("gemini", b'"index":0}],', b'"finishReason":"STOP"', separator=b"\r\n\r\n")),
        _sagemaker_bench("tgi", b"\n\n"),
        _sagemaker_bench("lmi", b"\n"),
    ]


def provider_relay(env: Env) -> dict[str, Any]:
    """Scenario 1's relay, through each added decoder: ``c`` clients streaming answers of
    ``provider_chunks`` tokens back to back, from the provider's fake directly (its own
    wire format) and through mlstream (ml-commons events), alternating, in the same run."""
    cfg = env.cfg
    knobs = {"chunks": cfg.provider_chunks}
    out: dict[str, Any] = {}
    for bench in provider_benches():
        fake = env.procs.start_fake(f"fake-{bench.name}", bench.module, bench.args)
        try:
            pair = _provider_pair(env, bench, fake, knobs)
            preflight(env, pair, cfg.provider_chunks)
            out[bench.name] = {"interface": bench.interface,
                               **_relay_level(env, pair, cfg.provider_concurrency, fake)}
        finally:
            env.procs.stop(fake)
    return {"chunks_per_stream": cfg.provider_chunks, "concurrency": cfg.provider_concurrency, "providers": out,
            "note": "each provider against its own fake, direct (its wire format) and through mlstream; "
                    "compare chunks/s"}


def _provider_pair(env: Env, bench: ProviderBench, fake: Child, knobs: dict[str, Any]) -> Pair:
    """The provider's fake directly (its wire format) and through ``_predict/stream``, on a
    model registered with the connector a user would write."""
    connector = bench.connector(fake.url, knobs)
    connector["client_config"] = {"max_connection": env.cfg.provider_concurrency}
    model_id = register_connector(env.admin, connector, f"bench {bench.name}")
    path, body, headers = bench.direct(fake.address, knobs)
    return Pair(bench.name, {
        "direct": build_request(fake.address, path, body, dialect=bench.dialect, stream=True,
                                headers=headers, label="direct"),
        "mlstream": build_request(env.mlstream.address, f"/_plugins/_ml/models/{model_id}/_predict/stream",
                                  {"parameters": {"inputs": BENCH_PROMPT, "_llm_interface": bench.interface}},
                                  dialect=MLSTREAM, stream=True, label="mlstream"),
    }, {"direct": fake.address, "mlstream": env.mlstream.address}, model_id)


# =========================================================================== 10. the OpenAI front


OPENAI_FRONT_SIDES = ("direct", "ml_commons", "openai")


def openai_front(env: Env) -> dict[str, Any]:
    """Scenarios 1 and 2 through ``/v1/chat/completions`` and through ``_predict/stream``, the
    same model and answer, each paired with the direct provider in the same run.

    Relay: ``_relay_level`` for each front at each ``openai_concurrency`` (its own direct
    trials alternating with it); the figure is the OpenAI front's mlstream/direct ratio over
    the ml-commons front's. First token: one client, the three targets alternated request by
    request (``alternate``), ``latency_pause_ms`` before each; the added time pair by pair
    (front − the direct request of the same round), and the OpenAI front's first-token p50
    over the ml-commons front's.
    """
    cfg = env.cfg
    out: dict[str, Any] = {"relay": {}}
    model = f"gpt-fake?chunks={cfg.throughput_chunks}"
    ml_pair = env.pair(model, max_connection=max(cfg.openai_concurrency))
    openai_pair = _openai_pair(env, ml_pair)
    preflight(env, ml_pair, cfg.throughput_chunks)
    preflight(env, openai_pair, cfg.throughput_chunks)
    for c in cfg.openai_concurrency:
        ml = _relay_level(env, ml_pair, c, env.fake)
        oa = _relay_level(env, openai_pair, c, env.fake)
        out["relay"][str(c)] = {"ml_commons": ml, "openai": oa,
                                "openai_over_ml_commons": ratio(oa["ratio_chunks"], ml["ratio_chunks"])}
    latency_model = f"gpt-fake?chunks={cfg.latency_chunks}"
    ml_pair = env.pair(latency_model, max_connection=4)
    openai_pair = _openai_pair(env, ml_pair)
    targets = {"direct": (ml_pair.addresses["direct"], ml_pair.requests["direct"]),
               "ml_commons": (ml_pair.addresses["mlstream"], ml_pair.requests["mlstream"]),
               "openai": (openai_pair.addresses["mlstream"], openai_pair.requests["mlstream"])}
    result = alternate(targets, cfg.latency_pairs, pause=cfg.latency_pause_ms / 1000, warmup=10, timeout=300)
    env.generator_runs.append({"label": "openai front first token", "wall": round(result.wall, 3),
                               "cpu": round(result.cpu, 3)})
    values = {side: [_latency_value(r, True) if r.ok else math.nan for r in result.responses[side]]
              for side in OPENAI_FRONT_SIDES}
    first: dict[str, Any] = {"model": latency_model, "pause_ms": cfg.latency_pause_ms}
    for side in OPENAI_FRONT_SIDES:
        outcomes = Outcomes.of(result.responses[side])
        first[side] = {"ms": summarize(values[side], 1000), "ok": outcomes.ok, "total": outcomes.total,
                       "errors": outcomes.errors}
        if side != "direct":
            added = [v - d for d, v in zip(values["direct"], values[side]) if d == d and v == v]
            first[side]["added_ms"] = summarize(added, 1000)
    first["openai_over_ml_commons_p50"] = ratio(first["openai"]["ms"]["p50"], first["ml_commons"]["ms"]["p50"])
    out["first_token_c1"] = first
    out["translated"] = _translated_relay(env)
    out["note"] = ("relay: chunks/s ratio mlstream/direct for each front, and the OpenAI front's over the "
                   "ml-commons front's (goal >= 0.90); first token: request's first byte -> first event with "
                   "non-empty content, c=1, the three targets alternated (goal: OpenAI p50 / ml-commons p50 <= 1.10); "
                   "translated: the same relay comparison for an Anthropic model, whose stream the OpenAI front "
                   "translates (Messages API events -> chat.completion.chunk)")
    return out


def _translated_relay(env: Env) -> dict[str, Any]:
    """Scenario 9's Anthropic relay through ``/v1/chat/completions`` (translated both ways)
    and through ``_predict/stream``, each front paired with the direct provider in the same run."""
    cfg = env.cfg
    bench = next(b for b in provider_benches() if b.name == "anthropic")
    knobs = {"chunks": cfg.provider_chunks}
    fake = env.procs.start_fake(f"fake-{bench.name}-openai-front", bench.module, bench.args)
    try:
        ml_pair = _provider_pair(env, bench, fake, knobs)
        request = build_request(env.mlstream.address, "/v1/chat/completions",
                                {"model": ml_pair.model_id, "stream": True,
                                 "messages": [{"role": "user", "content": BENCH_PROMPT}]},
                                dialect=DIRECT, stream=True, label="openai")
        openai_pair = Pair(bench.name, {"direct": ml_pair.requests["direct"], "mlstream": request},
                           ml_pair.addresses, ml_pair.model_id)
        preflight(env, ml_pair, cfg.provider_chunks)
        preflight(env, openai_pair, cfg.provider_chunks)
        ml = _relay_level(env, ml_pair, cfg.provider_concurrency, fake)
        oa = _relay_level(env, openai_pair, cfg.provider_concurrency, fake)
    finally:
        env.procs.stop(fake)
    # Both fronts against one direct figure, their direct trials pooled: the fake's own rate
    # moved up to 2x between the two fronts' trials on a shared machine, which said more
    # about the machine than about either front. Then the ratio is the fronts' own rates'.
    direct = (ml["direct"]["chunks_per_s"] + oa["direct"]["chunks_per_s"]) / 2
    return {"provider": bench.interface, "chunks_per_stream": cfg.provider_chunks,
            "concurrency": cfg.provider_concurrency, "ml_commons": ml, "openai": oa,
            "direct_pooled_chunks_per_s": round(direct, 1),
            "openai_over_ml_commons": ratio(oa["mlstream"]["chunks_per_s"], ml["mlstream"]["chunks_per_s"])}


def _openai_pair(env: Env, ml_pair: Pair) -> Pair:
    """``ml_pair``'s model and direct request, its mlstream side through ``/v1/chat/completions``:
    the answer is the provider's own chunks, so the direct dialect's markers count it."""
    request = build_request(env.mlstream.address, "/v1/chat/completions",
                            {"model": ml_pair.model_id, "messages": SEED_MESSAGES, "stream": True},
                            dialect=DIRECT, stream=True, label="openai")
    return Pair(ml_pair.model, {"direct": ml_pair.requests["direct"], "mlstream": request},
                {"direct": ml_pair.addresses["direct"], "mlstream": env.mlstream.address}, ml_pair.model_id)
