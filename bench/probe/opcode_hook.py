"""Bytecodes and C calls per function of an mlstream server, for ``bench/probe/cpu_profile.py --opcodes``.

Imported by ``sitecustomize`` beside it when ``MLSTREAM_OPCODES`` names a directory.
Every thread started after start-up runs under ``sys.settrace`` (every bytecode
executed, counted by the function it belongs to) and ``sys.setprofile`` (every call
of a C function, counted by its name), but counts only between SIGUSR1 and SIGUSR2,
which also write ``end.json``. Deterministic, and slow while counting: a count of the
work, not of its time (a bytecode is tens of nanoseconds, a C call anything).
``MLSTREAM_OPCODES_WINDOW=first``: only what a stream's handler thread runs from its
request head to its first event written (the first token's own path).
"""

from __future__ import annotations

import _thread
import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

_opcodes: Counter[tuple[str, int, str]] = Counter()
_c_calls: Counter[str] = Counter()
_counting = [False]
_window = threading.local()  # .on: this thread is inside the counted window (window mode)
_windowed = os.environ.get("MLSTREAM_OPCODES_WINDOW") == "first"
_original_start = _thread.start_new_thread


def _where(code: Any) -> tuple[str, int, str]:
    return code.co_filename, code.co_firstlineno, code.co_qualname


def _trace(frame: Any, event: str, arg: Any) -> Any:
    if not _counting[0] or (_windowed and not getattr(_window, "on", False)):
        return _trace
    if event == "call":
        frame.f_trace_opcodes = True
        return _trace
    if event == "opcode":
        code = frame.f_code
        if code.co_filename == "<string>":  # a dataclass's generated method: named by its class
            owner = type(frame.f_locals.get("self")).__qualname__
            _opcodes[("<string>", 0, f"{owner}.{code.co_name}")] += 1
        else:
            _opcodes[_where(code)] += 1
    return _trace


def _profile(frame: Any, event: str, arg: Any) -> None:
    if event == "c_call" and _counting[0] and (not _windowed or getattr(_window, "on", False)):
        _c_calls[f"{getattr(arg, '__qualname__', arg)}"] += 1


def _start_traced(function: Any, args: tuple = (), kwargs: dict | None = None) -> int:
    def run(*a: Any, **k: Any) -> Any:
        sys.settrace(_trace)
        sys.setprofile(_profile)
        return function(*a, **k)

    return _original_start(run, args, kwargs or {})


def _start_counting() -> None:
    _opcodes.clear()
    _c_calls.clear()
    _counting[0] = True


def _stop_counting() -> None:
    _counting[0] = False
    out = Path(os.environ["MLSTREAM_OPCODES"])
    data = {"opcodes": [[*where, count] for where, count in _opcodes.items()], "c_calls": dict(_c_calls)}
    (out / "end.tmp").write_text(json.dumps(data))
    (out / "end.tmp").rename(out / "end.json")


def install() -> None:
    _thread.start_new_thread = _start_traced  # type: ignore[assignment]
    threading._start_new_thread = _start_traced  # type: ignore[attr-defined]
    if _windowed:
        _install_window()
    signal.signal(signal.SIGUSR1, lambda *_: _start_counting())
    signal.signal(signal.SIGUSR2, lambda *_: _stop_counting())


def _install_window() -> None:
    from mlstream.server import sse_writer, transport

    parse, run = transport.HTTPRequestHandler.parse_request, sse_writer.SSEWriter.run

    def parse_request(self: Any) -> Any:
        _window.on = True
        return parse(self)

    def run_windowed(self: Any, channel: Any, item: Any, head: Any) -> Any:
        write = self._write

        def first_write(data: bytes) -> Any:
            try:
                return write(data)
            finally:
                _window.on = False
                self._write = write

        self._write = first_write
        return run(self, channel, item, head)

    transport.HTTPRequestHandler.parse_request = parse_request
    sse_writer.SSEWriter.run = run_windowed
