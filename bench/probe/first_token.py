"""Where a stream's first token goes after the previous stream: stage timings inside mlstream.

    python bench/probe/first_token.py [chunks] [pairs] [pause_ms]

Starts the fake provider and an mlstream server whose Python loads
``bench/probe/sitecustomize.py`` (its source: this tree, or ``BENCH_MLSTREAM_SRC``),
runs scenario 2's client-realistic run (two requests in a row per server, the second
recorded, every event parsed) and prints, for the recorded mlstream requests, the
medians of each stage and of what the previous stream left on this one's path.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.loadgen import alternate  # noqa: E402
from bench.procs import Admin, Processes, register_model  # noqa: E402
from bench.scenarios import make_pair  # noqa: E402


def main() -> None:
    chunks = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    pause = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
    trace = Path(tempfile.mkdtemp(prefix="mlstream-probe-")) / "probe.json"
    source = os.environ.get("BENCH_MLSTREAM_SRC") or str(ROOT)
    with Processes() as procs:
        fake = procs.start_fake()
        # only the mlstream server (started next) loads the probe: the fake is mlstream's too
        os.environ["MLSTREAM_PROBE"] = str(trace)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), source])
        server = procs.start_mlstream(workers=128, queue_chunks=64)
        admin = Admin(server.address)
        time.sleep(0.3)
        model = f"gpt-fake?chunks={chunks}"
        pair = make_pair(model, register_model(admin, fake.address, model, max_connection=4), fake.address,
                         server.address, stream=True)
        targets = {side: (pair.addresses[side], pair.requests[side]) for side in ("direct", "mlstream")}
        result = alternate(targets, pairs, pause=pause, warmup=WARMUP, timeout=300, runs=2, parse_events=True)
    direct = [r.ttft * 1000 for r in result.responses["direct"] if r.ok]
    through = [r.ttft * 1000 for r in result.responses["mlstream"] if r.ok]
    print(f"{model}, pause {pause * 1000:g} ms, load {os.getloadavg()[0]:.1f}: first token p50 direct "
          f"{statistics.median(direct):.3f} ms, mlstream {statistics.median(through):.3f} ms, added "
          f"{statistics.median(m - d for d, m in zip(direct, through)):+.3f} ms")
    report(json.loads(trace.read_text()))


WARMUP = 10


def report(probe: dict) -> None:
    # after the 10 warm-up streams, every second stream is a recorded one (it followed the same
    # server's answer); the first of each pair followed the direct requests instead
    requests = [r for r in probe["requests"] if "first_write" in r][WARMUP:][1::2]

    def median(values) -> str:  # type: ignore[no-untyped-def]
        values = list(values)
        return f"{statistics.median(values):.3f}" if values else "-"

    print(f"recorded requests: {len(requests)} (medians, ms)")
    print("  head in -> first event written:", median((r["first_write"] - r["start"]) * 1000 for r in requests))
    print("    of which head in -> provider call:", median((r["open_start"] - r["start"]) * 1000 for r in requests),
          "| provider call -> its head:", median((r["open_end"] - r["open_start"]) * 1000 for r in requests),
          "| -> first event written:", median((r["first_write"] - r["open_end"]) * 1000 for r in requests))
    print("  handler thread CPU, head in -> first event:",
          median((r["thread_cpu_first"] - r["thread_cpu_start"]) * 1000 for r in requests),
          "| of which head in -> provider call:",
          median((r["thread_cpu_open_start"] - r["thread_cpu_start"]) * 1000 for r in requests),
          "| provider call -> its head:",
          median((r["thread_cpu_open_end"] - r["thread_cpu_open_start"]) * 1000 for r in requests),
          "| -> first event written:",
          median((r["thread_cpu_first"] - r["thread_cpu_open_end"]) * 1000 for r in requests),
          "| process CPU:", median((r["cpu_first"] - r["cpu_start"]) * 1000 for r in requests))
    print("  previous stream's last write -> this head in:",
          median((r["start"] - r["previous_last_write"]) * 1000 for r in requests),
          "| process CPU meanwhile:", median((r["cpu_start"] - r["cpu_previous_last_write"]) * 1000 for r in requests))
    waits = [r for r in requests if r.get("rq_previous_end") is not None]
    print("  handler thread run-queue wait, previous request's end -> first event written:",
          median(r["rq_first"] - r["rq_previous_end"] for r in waits),
          "(mean %.3f)" % statistics.mean(r["rq_first"] - r["rq_previous_end"] for r in waits) if waits else "")
    in_path = sum(1 for r in requests for b, _, _ in probe["collections"] if r["start"] <= b <= r["first_write"])
    print(f"  garbage collections between head in and first event: {in_path} "
          f"(of {len(probe['collections'])} in the run)")
    late = sum(1 for r in requests for b, e in probe["finishes"] if b < r["start"] < e)
    print(f"  a provider response's teardown still running when a request's head came in: {late}")


if __name__ == "__main__":
    main()
