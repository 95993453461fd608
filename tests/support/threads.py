"""Calls that block, run where a test can watch them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_in_thread(target: Callable[..., Any], *args: Any,
                  **kwargs: Any) -> tuple[threading.Thread, list[Any], threading.Event]:
    """Start ``target(*args, **kwargs)`` in a daemon thread; returns (thread, result
    holder, finished Event). The holder gets the return value; ``finished`` is set
    either way."""
    result: list[Any] = []
    finished = threading.Event()

    def body() -> None:
        try:
            result.append(target(*args, **kwargs))
        finally:
            finished.set()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, result, finished
