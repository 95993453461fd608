"""Secrets taken out of text that leaves the server: a provider's or STS's error message
may echo the key or token a request was signed with."""

from __future__ import annotations

from collections.abc import Iterable


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret, and any prefix of it of 8 or more characters, with ***.

    Providers echo keys in their error messages, some masked ("sk-abc***xyz"), some
    cut after a prefix; longest first, so a full echo is replaced whole.
    """
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue
        text = text.replace(secret, "***")
        for length in range(len(secret) - 1, 7, -1):
            if secret[:length] in text:
                text = text.replace(secret[:length], "***")
    return text
