"""Stage timings inside an mlstream server, for ``bench/probe/first_token.py``.

Loaded by Python at start-up when this directory is on PYTHONPATH; does nothing
unless ``MLSTREAM_PROBE`` names the JSON file to write at exit (or one of
``cpu_profile.py``'s hooks is asked for: ``MLSTREAM_PROFILE``, ``MLSTREAM_STAGES``,
``MLSTREAM_OPCODES``). For each request it
records, on the handler thread: when its head was in, when its provider call was
opened and answered, when its first event was written; the process's and the
thread's CPU time and the thread's run-queue wait (``/proc/thread-self/schedstat``:
time runnable but not running) at those points and at the previous request's end;
the previous stream's last write; every garbage collection; every provider
response's ``finish`` (the reader's teardown). A diagnostic, not a benchmark: it
adds a few microseconds per request.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time

if os.environ.get("MLSTREAM_PROFILE"):  # cpu_profile.py: every thread under cProfile
    import profile_hook

    profile_hook.install()

if os.environ.get("MLSTREAM_STAGES"):  # cpu_profile.py --stages: thread CPU per named function
    import stage_hook

    stage_hook.install()

if os.environ.get("MLSTREAM_OPCODES"):  # cpu_profile.py --opcodes: bytecodes and C calls per function
    import opcode_hook

    opcode_hook.install()

if os.environ.get("MLSTREAM_PROBE"):
    from mlstream.upstream import client as upstream
    from mlstream.server import sse_writer, transport

    _now = time.perf_counter
    _requests: list[dict] = []
    _collections: list[tuple[float, float, int]] = []
    _finishes: list[tuple[float, float]] = []
    _last: dict[str, float] = {}

    def _run_queue_ms() -> float:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e6

    def _on_gc(phase: str, info: dict, _start: list[float] = [0.0]) -> None:
        if phase == "start":
            _start[0] = _now()
        else:
            _collections.append((_start[0], _now(), info["generation"]))

    gc.callbacks.append(_on_gc)
    Handler = transport.HTTPRequestHandler
    _parse, _handle, _run = Handler.parse_request, Handler._handle, sse_writer.SSEWriter.run
    _open, _finish = upstream.ProviderCall.open, upstream.ProviderCall.finish

    def parse_request(self):  # type: ignore[no-untyped-def]
        record = {"start": _now(), "cpu_start": time.process_time(), "thread_cpu_start": time.thread_time(),
                  "rq_start": _run_queue_ms(), "rq_previous_end": getattr(self, "_probe_rq_end", None),
                  "previous_last_write": _last.get("write"), "cpu_previous_last_write": _last.get("cpu")}
        threading.current_thread()._probe = record  # type: ignore[attr-defined]
        return _parse(self)

    def _handle_probed(self):  # type: ignore[no-untyped-def]
        try:
            return _handle(self)
        finally:
            record = getattr(threading.current_thread(), "_probe", None)
            self._probe_rq_end = _run_queue_ms()
            if record is not None:
                record["end"] = _now()
                _requests.append(record)

    def run(self, channel, item, head):  # type: ignore[no-untyped-def]
        write, record = self._write, getattr(threading.current_thread(), "_probe", None)

        def probed_write(data: bytes):  # type: ignore[no-untyped-def]
            result = write(data)
            now = _now()
            if record is not None and "first_write" not in record:
                record.update(first_write=now, cpu_first=time.process_time(), thread_cpu_first=time.thread_time(),
                              rq_first=_run_queue_ms())
            _last.update(write=now, cpu=time.process_time())
            return result

        self._write = probed_write
        return _run(self, channel, item, head)

    def open_probed(self, wait):  # type: ignore[no-untyped-def]
        record = getattr(threading.current_thread(), "_probe", None)
        if record is not None:
            record["open_start"], record["thread_cpu_open_start"] = _now(), time.thread_time()
        try:
            return _open(self, wait)
        finally:
            if record is not None:
                record["open_end"], record["thread_cpu_open_end"] = _now(), time.thread_time()

    # ``finish`` is a method since tracing came (a static method before): the call's own
    # arguments are passed on as they came, whichever it is.
    _finish_is_static = isinstance(upstream.ProviderCall.__dict__["finish"], staticmethod)

    def finish_probed(*args, **kwargs):  # type: ignore[no-untyped-def]
        began = _now()
        try:
            return _finish(*args, **kwargs)
        finally:
            _finishes.append((began, _now()))

    Handler.parse_request, Handler._handle, sse_writer.SSEWriter.run = parse_request, _handle_probed, run
    upstream.ProviderCall.open = open_probed
    upstream.ProviderCall.finish = staticmethod(finish_probed) if _finish_is_static else finish_probed

    @atexit.register
    def _dump() -> None:
        with open(os.environ["MLSTREAM_PROBE"], "w") as out:
            json.dump({"requests": _requests, "collections": _collections, "finishes": _finishes}, out)
