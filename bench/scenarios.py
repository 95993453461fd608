"""The six scenarios of the benchmark, each run against the fake provider directly
and through mlstream, alternating, in the same run.

Each scenario is a function ``(Env) -> dict`` whose dict goes into the JSON as
it is; ``bench/report.py`` turns those dicts into the Markdown tables. The sizes
come from :class:`Config` (``--quick`` shrinks them, never the method).

    Env            what the scenarios share: processes, the load generator, pairs
      Pair         one fake answer, as a direct request and as an mlstream request
    relay_throughput  added_latency  slow_streams (+ on-pace capacity)
    backpressure      cancellation   admission
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mlstream.testing.fake_openai import FakeOpenAI, fake_tokens, parse_scenario

from .loadgen import (DIRECT, MLSTREAM, WHOLE, LoadGenerator, Outcomes, Request, Response, RunResult, User,
                      build_request, percentile, summarize)
from .procs import (API_KEY, SEED_MESSAGES, STREAM_INTERFACE, Admin, Child, Processes, ProcSample,
                    register_model)

SIDES = ("direct", "mlstream")
SETTLE_SECONDS = 15.0       # longest wait for mlstream to finish streams between trials
MAX_BATCH_EVENTS = 64       # mlstream/server/handler.py: events written per batch
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
    latency_requests: int = 300       # per round, concurrency 1
    slow_streams: int = 1000
    slow_chunks: int = 50
    slow_delay_ms: int = 100
    capacity_levels: tuple[int, ...] = (40, 60, 80, 100, 120, 140, 160, 180, 200, 240, 280, 320, 400, 480, 560,
                                        640, 800, 1000)
    capacity_chunks: int = 100
    capacity_delay_ms: int = 20
    backpressure_chunks: int = 50_000     # x 1000 bytes: ~62 MB on the wire, far more than TCP buffers hold
    backpressure_chunk_bytes: int = 1000
    backpressure_pause: float = 5.0
    cancel_samples: int = 60
    cancel_delay_ms: int = 20
    cancel_silent_samples: int = 8    # the slow-provider variant (0 skips it)
    cancel_silent_delay_ms: int = 500
    admission_workers: int = 4
    admission_backlog: int = 4
    admission_probes: int = 300
    admission_fill_chunks: int = 30
    admission_fill_delay_ms: int = 100

    @classmethod
    def of(cls, quick: bool) -> "Config":
        """The full run's sizes, or the smoke run's (the same method, smaller and shorter)."""
        if not quick:
            return cls(quick=False, rounds=3, warmup=0.5, trial_seconds=2.5)
        return cls(quick=True, rounds=1, warmup=0.2, trial_seconds=0.8, latency_requests=100,
                   slow_streams=200, slow_chunks=20, capacity_levels=(40, 160), capacity_chunks=25,
                   backpressure_chunks=12_000, backpressure_pause=1.0, cancel_samples=10,
                   cancel_silent_samples=0, admission_probes=60, admission_fill_chunks=15)


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
    levels: dict[str, Any] = {}
    for c in cfg.throughput_concurrency:
        def trial(side: str, c: int = c) -> dict[str, Any]:
            end = cfg.warmup + cfg.trial_seconds
            users = [User(pair.addresses[side], pair.requests[side], count=10**9, stop_issuing=end)
                     for _ in range(c)]
            ml0, fake0 = env.mlstream.sample(), env.fake.sample()
            result = env.run(users, timeout=end + 60, window=(cfg.warmup, end), label=f"throughput c={c} {side}")
            ml1, fake1 = env.mlstream.sample(), env.fake.sample()
            out = Outcomes.of(result.responses)
            seconds = result.window_seconds
            return {"chunks": result.window_content, "bytes": result.window_bytes, "seconds": round(seconds, 3),
                    "chunks_per_s": round(result.window_content / seconds, 1) if seconds else None,
                    "streams": out.to_json(), "generator_cpu": round(result.cpu / result.wall, 3),
                    "mlstream_cpu": cpu_share(ml0, ml1, result.wall), "fake_cpu": cpu_share(fake0, fake1, result.wall)}
        trials = env.paired(trial)
        level: dict[str, Any] = {}
        for side in SIDES:
            rows = trials[side]
            chunks = sum(t["chunks"] for t in rows)
            nbytes = sum(t["bytes"] for t in rows)
            seconds = sum(t["seconds"] for t in rows)
            level[side] = {
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
        level["ratio_chunks"] = ratio(level["mlstream"]["chunks_per_s"], level["direct"]["chunks_per_s"])
        level["ratio_mb"] = ratio(level["mlstream"]["mb_per_s"], level["direct"]["mb_per_s"])
        levels[str(c)] = level
    return {"model": model, "chunks_per_stream": cfg.throughput_chunks, "concurrency": levels,
            "note": "MB/s counts every byte off the socket (HTTP framing included); the two wire formats "
                    "differ in size per chunk, so compare chunks/s."}


# =========================================================================== 2. added latency


def added_latency(env: Env) -> dict[str, Any]:
    """Time to first content event (stream) and total latency (non-stream), at c=1 and c=64."""
    cfg = env.cfg
    model = f"gpt-fake?chunks={cfg.latency_chunks}"
    pairs = {"stream": env.pair(model, max_connection=64),
             "non_stream": env.pair(model, stream=False, max_connection=64)}
    preflight(env, pairs["stream"], cfg.latency_chunks)
    preflight(env, pairs["non_stream"], cfg.latency_chunks)
    out: dict[str, Any] = {"model": model}
    for kind, pair in pairs.items():
        for c in (1, 64):
            def trial(side: str, c: int = c, pair: Pair = pair, kind: str = kind) -> dict[str, Any]:
                addr, req = pair.addresses[side], pair.requests[side]
                if c == 1:
                    # a few unrecorded requests first: connection set-up, caches
                    env.run([User(addr, req, count=10)], timeout=30, label="latency warm-up")
                    result = env.run([User(addr, req, count=cfg.latency_requests)], timeout=120,
                                     label=f"latency {kind} c=1 {side}")
                    kept = result.responses
                else:
                    end = cfg.warmup + cfg.trial_seconds
                    users = [User(addr, req, count=10**9, stop_issuing=end) for _ in range(c)]
                    result = env.run(users, timeout=end + 60, label=f"latency {kind} c={c} {side}")
                    first = min(r.t_send for r in result.responses)
                    kept = [r for r in result.responses if r.t_send >= first + cfg.warmup]
                values = [r.ttfe if kind == "stream" else r.latency for r in kept if r.ok]
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
            out[f"{kind}_c{c}"] = entry
    out["note"] = ("stream: request sent -> first content event received; non-stream: request sent -> "
                   "whole response received. Keep-alive connections; c=64 leaves out the first "
                   f"{cfg.warmup} s.")
    return out


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
        ramp = 1.0
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
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] != "01":  # ESTABLISHED only (a listener's rx_queue is its accept backlog)
                        continue
                    lport = int(parts[1].rsplit(":", 1)[1], 16)
                    rport = int(parts[2].rsplit(":", 1)[1], 16)
                    tx, rx = (int(x, 16) for x in parts[4].split(":"))
                    out.append((lport, rport, tx + rx))
        except OSError:
            pass
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
    """A small pool, filled with slow streams; then stream requests that must be refused at once.

    Server: ``--stream-workers W --stream-backlog B``; W + B slow streams fill it
    (W run, B wait for a worker). A probe client then sends requests one after
    another on one keep-alive connection: each must get 429, and its latency is
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
        fill = env.pair(fill_model, server=server, admin=admin)
        probe = env.pair(fill_model, server=server, admin=admin)  # same answer: refused before any upstream call
        refuse = make_pair("gpt-fake?status=429", "-", env.fake.address, server.address, stream=True)
        fill_seconds = cfg.admission_fill_chunks * cfg.admission_fill_delay_ms / 1000
        timeout = 3 * fill_seconds + 30

        def fill_users() -> list[User]:
            return [User(fill.addresses["mlstream"], fill.requests["mlstream"], start=0.01 * i, track_gaps=True)
                    for i in range(w + b)]

        baseline = env.run(fill_users(), timeout=timeout, label="admission baseline")
        env.settle(admin)
        rejected0 = admin.metrics().get("mlstream_streams_rejected_total", 0)
        # Probes spread over the time the pool is full: until the first W fill streams end
        # (then the B waiting ones start and the backlog has room again).
        probe_start = 0.01 * (w + b) + 0.3
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
        fills = [r for r in loaded.responses if r.request is fill.requests["mlstream"]]
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
            "expected_content_events": (w + b) * cfg.admission_fill_chunks,
            "probe_interval_ms": round(think * 1000, 2),
            "note": "refusal latency: request sent -> whole 429 response received, one keep-alive connection, "
                    "probes spread over the time the pool is full; direct = the fake provider answering 429 "
                    "itself (back to back)",
        }
    finally:
        admin.close()
        env.procs.stop(server)


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


SCENARIOS: dict[str, Callable[[Env], dict[str, Any]]] = {
    "relay_throughput": relay_throughput,
    "added_latency": added_latency,
    "slow_streams": slow_streams,
    "backpressure": backpressure,
    "cancellation": cancellation,
    "admission": admission,
}
