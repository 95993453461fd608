"""A provider's error answer as our error: the Retry-After passed on is always whole seconds."""

from __future__ import annotations

import email.utils
import time

import pytest
from urllib3 import HTTPHeaderDict

from mlstream.upstream.client import error_from_response

URL = "https://api.example.com/v1/chat/completions"


def passed_on(value: str | None) -> str:
    headers = HTTPHeaderDict() if value is None else HTTPHeaderDict({"Retry-After": value})
    return error_from_response(429, b'{"error": {"message": "slow down"}}', URL, [], headers).headers["Retry-After"]


@pytest.mark.parametrize("value, expected", [
    ("7", "7"), ("30", "30"), ("0", "1"), (None, "1"), ("soon", "1"), ("-7", "1"), ("1.5", "1"),
    ("5\r\n  X-Injected: yes", "1"),                               # a folded value never goes out raw
    (email.utils.formatdate(time.time() - 3600, usegmt=True), "1"),  # a date in the past
], ids=["seconds", "more-seconds", "zero", "absent", "word", "negative", "fraction", "folded", "past-date"])
def test_retry_after_passed_on_as_whole_seconds(value: str | None, expected: str) -> None:
    assert passed_on(value) == expected


def test_retry_after_as_a_date_becomes_the_seconds_until_it() -> None:
    seconds = int(passed_on(email.utils.formatdate(time.time() + 120, usegmt=True)))
    assert 100 <= seconds <= 121


def test_only_a_429_carries_retry_after() -> None:
    error = error_from_response(503, b"busy", URL, [], HTTPHeaderDict({"Retry-After": "9"}))
    assert "Retry-After" not in error.headers
