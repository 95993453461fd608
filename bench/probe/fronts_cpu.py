"""Server CPU per streamed answer through ``_predict/stream``, ``/v1/messages`` and
``/v1/responses``, alternated round by round on one server:

    python bench/probe/fronts_cpu.py [--chunks 200] [--requests 800] [--concurrency 16]
                                     [--rounds 6] [--unstored]

One fake provider and one mlstream server (its source: this tree, or
``BENCH_MLSTREAM_SRC``); each round sends ``--requests`` streams of one OpenAI-interface
model through each front in turn (the order rotating), ``--concurrency`` clients at
once, and reads the server process's CPU (every thread, user + system) around it.
Prints each front's median CPU per answer and its ratio to ``_predict/stream``'s:
scenario 11's relay figure without the direct side, whose own spread on two shared
cores is as large as the difference looked for. ``--unstored`` adds a fourth side: the
Responses front with ``"store": false`` (what keeping the response costs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.loadgen import LoadGenerator, User  # noqa: E402
from bench.probe.cpu_profile import cpu_times  # noqa: E402
from bench.procs import Admin, Processes, register_model  # noqa: E402
from bench.scenarios import make_pair  # noqa: E402  (before bench.fronts, which it imports)
from bench.fronts import front_request  # noqa: E402

SIDES = ("ml_commons", "messages", "responses")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--unstored", action="store_true", help="also the Responses front with store false")
    args = parser.parse_args()
    sides = SIDES + (("responses_unstored",) if args.unstored else ())
    with Processes() as procs:
        fake = procs.start_fake()
        server = procs.start_mlstream(workers=128, queue_chunks=64)
        model = f"gpt-fake?chunks={args.chunks}"
        pair = make_pair(model, register_model(Admin(server.address), fake.address, model, max_connection=4),
                         fake.address, server.address, stream=True)
        targets = {"ml_commons": pair.requests["mlstream"],
                   **{front: front_request(server.address, front, pair.model_id) for front in SIDES[1:]},
                   "responses_unstored": front_request(server.address, "responses", pair.model_id, store=False)}
        figures: dict[str, list[float]] = {side: [] for side in sides}
        system: dict[str, list[float]] = {side: [] for side in sides}
        wall: dict[str, list[float]] = {side: [] for side in sides}
        for round_number in range(args.rounds + 1):  # round 0 warms up
            turn = round_number % len(sides)
            order = sides[turn:] + sides[:turn]
            for side in order:
                users = [User(server.address, targets[side], count=max(1, args.requests // args.concurrency))
                         for _ in range(args.concurrency)]
                before, started = cpu_times(server.pid), time.monotonic()
                responses = LoadGenerator().run(users, timeout=600).responses
                after, took = cpu_times(server.pid), time.monotonic() - started
                cpu = sum(after) - sum(before)
                failed = sum(not response.ok for response in responses)
                if failed:
                    raise SystemExit(f"{failed} of {len(responses)} {side} streams failed")
                if round_number:
                    figures[side].append(cpu / len(responses) * 1e6)
                    system[side].append((after[1] - before[1]) / len(responses) * 1e6)
                    wall[side].append(took / len(responses) * 1e6)
    base = statistics.median(figures["ml_commons"])
    print(f"{args.chunks}-chunk answers, c={args.concurrency}, {args.rounds} rounds of {args.requests}; "
          f"server CPU per answer (µs), median [min-max], over ml_commons, its system part, and the wall "
          f"time per answer (µs: 1 / answers per second), over ml_commons':")
    for side in sides:
        values = figures[side]
        middle = statistics.median(values)
        print(f"  {side:18} {middle:7.0f} [{min(values):.0f}-{max(values):.0f}]  {middle / base:.3f}  "
              f"system {statistics.median(system[side]):.0f}  wall {statistics.median(wall[side]):.0f} "
              f"{statistics.median(wall[side]) / statistics.median(wall['ml_commons']):.3f}")
    print(f"  load average at the end {time.strftime('%H:%M:%S')}: {open('/proc/loadavg').read().split()[0]}")


if __name__ == "__main__":
    main()
