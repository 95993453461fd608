"""Server CPU per request, and where it goes: one mlstream server under load from one client.

    python bench/probe/cpu_profile.py [--predict] [--chunks 10] [--requests 2000]
                                      [--pause-ms 0] [--profile | --py-spy] [--top 40]

Starts the fake provider and an mlstream server (its source: this tree, or
``BENCH_MLSTREAM_SRC``), registers a model on the fake, warms up, then sends
``--requests`` requests one after another on one keep-alive connection
(``_predict/stream``, or ``_predict`` with ``--predict``). Prints the server
process's CPU per request (``/proc/<pid>/stat``: every thread, user + system),
without a profiler unless ``--profile``: then every server thread runs under
cProfile timed by its own CPU clock (``profile_hook``) and the functions that
took the most CPU are listed in µs per request (own time and with callees). The
profiler makes every Python call dearer: compare its shares, and take the
unprofiled figure as the cost. ``--py-spy`` samples the server instead (``py-spy
record --nonblocking``, 1000 Hz, idle threads left out; ``pip install py-spy``):
far less distortion, the same table from the samples (µs = samples / rate / requests).
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import signal
import subprocess
import sys
from collections import Counter
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.loadgen import LoadGenerator, User, _exchange  # noqa: E402
from bench.procs import CLK_TCK, Admin, Processes, register_model  # noqa: E402
from bench.scenarios import make_pair  # noqa: E402  (before bench.fronts, which it imports)
from bench.fronts import front_request  # noqa: E402

WARMUP = 200
SNAPSHOT_SECONDS = 10.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--predict", action="store_true", help="non-stream _predict")
    parser.add_argument("--front", choices=("messages", "responses"), help="stream through /v1/messages or "
                        "/v1/responses instead of _predict/stream")
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--pause-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=1, help="clients streaming at once (the load "
                        "generator's, each on its own keep-alive connection); --requests in all")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--py-spy", action="store_true")
    parser.add_argument("--stages", action="store_true", help="thread CPU of the functions in stage_hook.STAGES")
    parser.add_argument("--opcodes", action="store_true", help="bytecodes and C calls per function (opcode_hook)")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--sort", choices=("tottime", "cumtime"), default="tottime")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="mlstream-cpu-"))
    source = os.environ.get("BENCH_MLSTREAM_SRC") or str(ROOT)
    with Processes() as procs:
        fake = procs.start_fake()
        saved = dict(os.environ)
        hook = "MLSTREAM_PROFILE" if args.profile else "MLSTREAM_STAGES" if args.stages else "MLSTREAM_OPCODES"
        if args.profile or args.stages or args.opcodes:
            os.environ[hook] = str(out)
            os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), source])
        try:
            server = procs.start_mlstream(workers=128, queue_chunks=64)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        admin = Admin(server.address)
        model = f"gpt-fake?chunks={args.chunks}"
        pair = make_pair(model, register_model(admin, fake.address, model, max_connection=4), fake.address,
                         server.address, stream=not args.predict)
        target = (pair.addresses["mlstream"], pair.requests["mlstream"])
        if args.front:
            target = (server.address, front_request(server.address, args.front, pair.model_id))
        conns: dict = {"mlstream": None}
        deadline = time.monotonic() + 600
        for _ in range(WARMUP):
            _exchange(conns, "mlstream", target, deadline)
        if args.profile or args.stages:
            snapshot(server.pid, signal.SIGUSR1, out / ("start.marshal" if args.profile else "start.json"))
        elif args.opcodes:
            os.kill(server.pid, signal.SIGUSR1)
            time.sleep(1.0)  # the main thread takes the signal within 0.5 s
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(server.pid), "--rate", str(SPY_RATE),
                                    "--nonblocking", "--format", "raw", "--output", str(out / "spy.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached
        cpu0, wall0, load0 = cpu_times(server.pid), time.monotonic(), os.getloadavg()[0]
        fake0, switches0 = cpu_times(fake.pid), context_switches(server.pid)
        failed = 0
        if args.concurrency > 1:
            users = [User(target[0], target[1], count=args.requests // args.concurrency)
                     for _ in range(args.concurrency)]
            failed = sum(not response.ok for response in LoadGenerator().run(users, timeout=600).responses)
        for _ in range(args.requests if args.concurrency == 1 else 0):
            if args.pause_ms:
                time.sleep(args.pause_ms / 1000)
            failed += not _exchange(conns, "mlstream", target, deadline).ok
        cpu1, wall1, fake1 = cpu_times(server.pid), time.monotonic(), cpu_times(fake.pid)
        switches1 = context_switches(server.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        if args.profile or args.stages or args.opcodes:
            snapshot(server.pid, signal.SIGUSR2, out / ("end.marshal" if args.profile else "end.json"))
        if conns["mlstream"] is not None:
            conns["mlstream"].close()
    n = args.requests
    kind = "_predict" if args.predict else f"{args.front or '_predict/stream'} ({args.chunks} chunks)"
    print(f"{kind}, {n} requests ({failed} failed), c={args.concurrency}, pause {args.pause_ms:g} ms, "
          f"load {load0:.1f}: "
          f"server CPU {(sum(cpu1) - sum(cpu0)) / n * 1e6:.0f} µs/request (user {(cpu1[0] - cpu0[0]) / n * 1e6:.0f}, "
          f"system {(cpu1[1] - cpu0[1]) / n * 1e6:.0f}), fake {(sum(fake1) - sum(fake0)) / n * 1e6:.0f}, "
          f"wall {(wall1 - wall0) / n * 1e6:.0f} µs/request, {(switches1 - switches0) / n:.1f} thread sleeps/request"
          + (" (profiled)" if args.profile else ""))
    if args.profile:
        report(marshal.loads((out / "start.marshal").read_bytes()), marshal.loads((out / "end.marshal").read_bytes()),
               n, args.top, args.sort)
    if args.stages:
        start, end = (json.loads((out / f"{name}.json").read_text()) for name in ("start", "end"))
        print(f"{'µs/req':>8} {'calls/req':>9}  function (thread CPU, callees included)")
        for name, (calls, ns) in end.items():
            before = start.get(name, [0, 0])
            if calls - before[0]:
                print(f"{(ns - before[1]) / n / 1000:8.1f} {(calls - before[0]) / n:9.2f}  {name}")
    if args.opcodes:
        report_opcodes(json.loads((out / "end.json").read_text()), n, args.top)
    if args.py_spy:
        report_samples((out / "spy.txt").read_text(), n, args.top, args.sort)


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` (every thread) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def context_switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far (threads that ended are not counted)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def snapshot(pid: int, signum: int, path: Path) -> None:
    os.kill(pid, signum)
    deadline = time.monotonic() + SNAPSHOT_SECONDS
    while not path.exists():  # written by the server's main thread within its next wake-up (0.5 s)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server wrote no {path.name}")
        time.sleep(0.05)


def report(start: dict, end: dict, requests: int, top: int, sort: str) -> None:
    rows = []
    for func, (cc, nc, tt, ct, _callers) in end.items():
        before = start.get(func, (0, 0, 0.0, 0.0, {}))
        calls, own, total = nc - before[1], tt - before[2], ct - before[3]
        if calls > 0 or own > 0:
            rows.append((func, calls, own, total))
    whole = sum(own for _, _, own, _ in rows)
    print(f"profiled CPU: {whole / requests * 1e6:.0f} µs/request; top by {sort} (µs per request):")
    print(f"{'own':>8} {'cum':>8} {'calls/req':>9}  function")
    by_file: dict[str, list[float]] = {}
    for (filename, _line, _name), calls, own, _total in rows:
        where = filename.replace(str(ROOT) + "/", "").replace(sys.prefix, "<py>")
        figures = by_file.setdefault(where, [0.0, 0.0])
        figures[0] += own
        figures[1] += calls
    print(f"calls per request: {sum(calls for _, calls, _, _ in rows) / requests:.0f}; by file (own µs, calls):")
    for where, (own, calls) in sorted(by_file.items(), key=lambda item: -item[1][0])[:top // 2]:
        print(f"{own / requests * 1e6:8.1f} {calls / requests:9.1f}  {where}")
    rows.sort(key=lambda row: row[2] if sort == "tottime" else row[3], reverse=True)
    for (filename, line, name), calls, own, total in rows[:top]:
        where = filename.replace(str(ROOT) + "/", "").replace(sys.prefix, "<py>")
        print(f"{own / requests * 1e6:8.1f} {total / requests * 1e6:8.1f} {calls / requests:9.2f}  "
              f"{name} ({where}:{line})")


SPY_RATE = 1000


def report_opcodes(counts: dict, requests: int, top: int) -> None:
    rows = sorted(counts["opcodes"], key=lambda row: -row[3])
    by_file: Counter[str] = Counter()
    for filename, _line, _name, count in rows:
        by_file[filename.replace(str(ROOT) + "/", "").replace(sys.prefix, "<py>")] += count
    total = sum(row[3] for row in rows)
    print(f"bytecodes per request: {total / requests:.0f}, C calls: {sum(counts['c_calls'].values()) / requests:.0f}")
    print("by file:")
    for where, count in by_file.most_common(top // 2):
        print(f"{count / requests:8.0f}  {where}")
    print("by function:")
    for filename, line, name, count in rows[:top]:
        where = filename.replace(str(ROOT) + "/", "").replace(sys.prefix, "<py>")
        print(f"{count / requests:8.0f}  {name} ({where}:{line})")
    print("C calls by name:")
    for name, count in Counter(counts["c_calls"]).most_common(top // 2):
        print(f"{count / requests:8.1f}  {name}")


def report_samples(collapsed: str, requests: int, top: int, sort: str) -> None:
    """py-spy's collapsed stacks ("frame;frame;... count") as µs of CPU per request by function."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = [frame.split(" (", 1)[0] + " (" + frame.split(" (", 1)[1].replace(str(ROOT) + "/", "")
                  .replace(sys.prefix, "<py>").rsplit(":", 1)[0] + ")" if " (" in frame else frame
                  for frame in stack.split(";")[1:]]  # the first frame names the thread
        if frames:
            own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    scale = 1e6 / SPY_RATE / requests
    print(f"sampled CPU: {samples * scale:.0f} µs/request; top by {sort} (µs per request):")
    print(f"{'own':>8} {'cum':>8}  function")
    ranked = own if sort == "tottime" else total
    for frame, _ in ranked.most_common(top):
        print(f"{own[frame] * scale:8.1f} {total[frame] * scale:8.1f}  {frame}")


if __name__ == "__main__":
    main()
