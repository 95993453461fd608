"""A stand-in for the stream pool where only its counters are read (metrics)."""

from __future__ import annotations


class StubPool:
    active = queued = rejected = workers = 0
