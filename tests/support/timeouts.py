"""How long a test waits for something that should happen soon."""

from __future__ import annotations

import time
from collections.abc import Callable

# Seconds; only ever reached when something is broken, so generous for a loaded machine.
HANG_GUARD = 20.0
# Seconds for a child process (a Python interpreter, a built binary) to start and answer.
SUBPROCESS_HANG_GUARD = 30.0


def poll_until(predicate: Callable[[], object], timeout: float, interval: float = 0.01) -> bool:
    """For state nothing signals (a queue's length, the kernel's socket queues): check
    every ``interval`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
