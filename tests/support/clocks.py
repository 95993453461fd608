"""A clock for code that reads ``time.monotonic`` (patch its module's ``time`` with it)."""

from __future__ import annotations


class FakeClock:
    """``time.monotonic`` that only moves when a test moves ``now``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now
