"""Per-thread cProfile of an mlstream server, for ``bench/probe/cpu_profile.py``.

Imported by ``sitecustomize`` beside it when ``MLSTREAM_PROFILE`` names a directory.
Every thread started after start-up (``_thread.start_new_thread``, which
``threading`` and ``speedups.start_thread_nowait`` both use) runs under its own
``cProfile.Profile`` timed by its own CPU clock (``time.thread_time``): a function
that waits shows what it spent, not how long it slept. SIGUSR1 and SIGUSR2 write a
snapshot of every profile so far (``start.marshal``, ``end.marshal``): the driver
subtracts them, so start-up and warm-up are left out. A diagnostic: the profiler
multiplies the cost of every Python call, so compare shares, not totals.
"""

from __future__ import annotations

import _thread
import cProfile
import marshal
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

_profiles: list[cProfile.Profile] = []
_profiles_lock = threading.Lock()
_original_start = _thread.start_new_thread


def _start_profiled(function: Any, args: tuple = (), kwargs: dict | None = None) -> int:
    def run(*a: Any, **k: Any) -> Any:
        profile = cProfile.Profile(time.thread_time)
        with _profiles_lock:
            _profiles.append(profile)
        profile.enable()
        try:
            return function(*a, **k)
        finally:
            profile.disable()

    return _original_start(run, args, kwargs or {})


def _merged() -> dict:
    with _profiles_lock:
        profiles = list(_profiles)
    merged: dict = {}
    for profile in profiles:
        profile.snapshot_stats()
        for func, (cc, nc, tt, ct, callers) in profile.stats.items():  # type: ignore[attr-defined]
            old = merged.get(func)
            if old is None:
                merged[func] = (cc, nc, tt, ct, dict(callers))
            else:
                joined = dict(old[4])
                for caller, figures in callers.items():
                    before = joined.get(caller)
                    joined[caller] = figures if before is None else tuple(a + b for a, b in zip(before, figures))
                merged[func] = (old[0] + cc, old[1] + nc, old[2] + tt, old[3] + ct, joined)
    return merged


def _snapshot(name: str) -> None:
    out = Path(os.environ["MLSTREAM_PROFILE"])
    data = marshal.dumps(_merged())
    (out / f"{name}.tmp").write_bytes(data)
    (out / f"{name}.tmp").rename(out / f"{name}.marshal")  # whole or absent for the driver


def install() -> None:
    _thread.start_new_thread = _start_profiled  # type: ignore[assignment]
    threading._start_new_thread = _start_profiled  # type: ignore[attr-defined]
    # the handlers run on the main thread, between its waits (cli.serve wakes twice a second)
    signal.signal(signal.SIGUSR1, lambda *_: _snapshot("start"))
    signal.signal(signal.SIGUSR2, lambda *_: _snapshot("end"))
