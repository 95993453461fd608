"""``python -m bench [--quick] [--name NAME] [--only SCENARIO,...]``

Runs from the repository root. Exit status: 0 when every scenario ran (a missed
goal is a figure, not a failure), 1 when a scenario broke, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import mlstream

from . import report
from .procs import Admin, Child, Processes, mlstream_source, raise_nofile_limit
from .catalog import SCENARIOS
from .scenarios import Config, Env, ScenarioFailed

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MAIN_WORKERS = 128          # the main server's pool: every stream of scenarios 1-2 gets a worker at once


def machine() -> dict[str, Any]:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {"cores": os.cpu_count(), "usable_cores": affinity, "cpu_model": model,
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "mlstream_version": mlstream.__version__}


def provenance() -> dict[str, Any]:
    """The commit measured, and whether the work tree had changes on top of it
    (or the other source tree the mlstream servers run from: ``BENCH_MLSTREAM_SRC``)."""
    src = mlstream_source()
    if src is not None:
        return {"mlstream_src": src}
    root = Path(__file__).resolve().parent.parent
    out: dict[str, Any] = {}
    for key, cmd in (("commit", ["git", "rev-parse", "HEAD"]),
                     ("dirty", ["git", "status", "--porcelain", "--untracked-files=no", "--", "mlstream"])):
        try:
            done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            out[key] = done.stdout.strip() if key == "commit" else bool(done.stdout.strip())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run (under a minute)")
    parser.add_argument("--name", help="results file name (default: quick or full)")
    parser.add_argument("--only", help=f"comma-separated scenarios, of: {', '.join(SCENARIOS)}")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--server-processes", type=int, default=1, metavar="N",
                        help="run every mlstream server with --workers N (default 1)")
    parser.add_argument("--otel", action="store_true",
                        help="run every mlstream server with tracing on (--otel-endpoint), every request "
                             "sampled, exporting to a collector of its own on loopback")
    args = parser.parse_args(argv)
    if args.otel and mlstream_source() is not None:
        parser.error("--otel runs this tree's servers: the other source tree may not have tracing")
    selected = list(SCENARIOS)
    if args.only:
        selected = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in selected if name not in SCENARIOS]
        if unknown:
            parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    cfg = Config.of(args.quick)
    mode = "quick" if args.quick else "full"
    name = args.name or mode
    started = time.monotonic()
    nofile = raise_nofile_limit()
    results: dict[str, Any] = {
        "name": name, "mode": mode,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "source": provenance(), "open_files_limit": nofile,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "config": cfg.__dict__, "scenarios": {},
    }
    broken = False
    results["server_processes"] = args.server_processes
    with Processes(server_processes=args.server_processes) as procs:
        collector = start_collector(procs) if args.otel else None
        fake = procs.start_fake()
        server = procs.start_mlstream(workers=MAIN_WORKERS, queue_chunks=64)
        admin = Admin(server.address)
        try:
            time.sleep(0.2)
            sample = server.sample()
            results["idle"] = {"rss_kb": sample.rss_kb, "threads": sample.threads}
            env = Env(cfg, procs, fake, server, admin, queue_chunks=64)
            for scenario in selected:
                log(f"{scenario} ...")
                t0 = time.monotonic()
                try:
                    results["scenarios"][scenario] = SCENARIOS[scenario](env)
                except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
                    broken = True
                    # A scenario that ran but failed its checks (the churn soak) keeps its figures.
                    figures = exc.figures if isinstance(exc, ScenarioFailed) else {}
                    results["scenarios"][scenario] = {**figures, "error": traceback.format_exc()}
                    log(traceback.format_exc())
                    try:
                        env.settle()
                    except Exception:  # noqa: BLE001 - the next scenario will say if the server is gone
                        pass
                log(f"{scenario} done in {time.monotonic() - t0:.1f} s")
            after = server.sample()
            results["idle"]["rss_kb_after_run"] = after.rss_kb
            results["idle"]["threads_after_run"] = after.threads
            runs = env.generator_runs
            if runs:
                busiest = max(runs, key=lambda r: r["cpu"] / r["wall"] if r["wall"] > 0.2 else 0)
                wall, cpu = sum(r["wall"] for r in runs), sum(r["cpu"] for r in runs)
                results["generator"] = {
                    "runs": len(runs), "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
                    "share": round(cpu / wall, 3) if wall else None,
                    "busiest_label": busiest["label"],
                    "busiest_share": round(busiest["cpu"] / busiest["wall"], 3) if busiest["wall"] else None,
                    "runs_detail": runs}
        finally:
            admin.close()
            if collector is not None:
                results["otel"] = collector_figures(collector)
    results["exit_codes"] = procs.exit_codes
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["wall_seconds"] = round(time.monotonic() - started, 1)
    results["goals"] = report.goals(results)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    sys.stdout.write(report.render(results))
    sys.stdout.write(f"\nResults: {path}\n")
    return 1 if broken else 0


def start_collector(procs: Processes) -> Child:
    """A fake OTLP collector (its own process; it counts, decodes nothing) that every mlstream
    server started from now on exports to. Sampling is the SDK's default: every request."""
    collector = procs.start_fake("collector", "mlstream.testing.fake_collector", ())
    procs.server_extra = ["--otel-endpoint", collector.url]
    return collector


def collector_figures(collector: Child) -> dict[str, Any]:
    """What reached the collector so far (exports and bytes; the servers' last flush comes after)."""
    admin = Admin(collector.address)
    try:
        return {"endpoint": collector.url, **admin.ok("GET", "/stats")}
    finally:
        admin.close()


def log(message: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
