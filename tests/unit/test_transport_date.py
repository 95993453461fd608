"""The Date header, formatted once a second (no socket: the method alone)."""

from __future__ import annotations

import email.utils
import time

from mlstream.server.transport import HTTPRequestHandler


def test_the_date_is_this_seconds_and_a_given_timestamp_is_formatted_as_the_stdlib_does() -> None:
    handler = HTTPRequestHandler.__new__(HTTPRequestHandler)  # no connection needed
    for _ in range(3):  # the first call formats, the next ones come from the cache
        before = int(time.time())
        got = handler.date_time_string()
        after = int(time.time())
        assert got in {email.utils.formatdate(second, usegmt=True) for second in range(before, after + 1)}
    assert handler.date_time_string(0) == "Thu, 01 Jan 1970 00:00:00 GMT"


def test_a_new_second_gets_a_new_date(monkeypatch) -> None:
    handler = HTTPRequestHandler.__new__(HTTPRequestHandler)
    clock = [1_000_000_000.2]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    first = handler.date_time_string()
    clock[0] += 1.0
    assert handler.date_time_string() != first
    assert handler.date_time_string() == email.utils.formatdate(1_000_000_001, usegmt=True)
