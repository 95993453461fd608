"""The one seam credentials pass through on their way to and from the store.

Everything that writes a credential calls ``seal``; everything that needs it to
call a provider calls ``unseal``. Encryption at rest replaces ``PlainCodec``
with an AES-GCM codec without touching any caller.
"""

from __future__ import annotations

import json
from typing import Protocol


class CredentialCodec(Protocol):
    def seal(self, credential: dict[str, str]) -> str: ...

    def unseal(self, sealed: str) -> dict[str, str]: ...


class PlainCodec:
    """Stores credentials as JSON (no encryption yet)."""

    def seal(self, credential: dict[str, str]) -> str:
        return json.dumps(credential)

    def unseal(self, sealed: str) -> dict[str, str]:
        return json.loads(sealed)
