"""The one seam credentials pass through on their way to and from the store.

Everything that writes a credential calls ``seal``; everything that needs it to
call a provider calls ``unseal``. Sealed values are AES-256-GCM ciphertexts under
the master key, each with a fresh 96-bit nonce, bound to their purpose by the
associated data, so the store (and its WAL) never holds a secret in the clear.

The master key comes from ``MLSTREAM_MASTER_KEY`` (base64 of 32 bytes) or, when
that is unset, from ``master.key`` in the data directory (created on first start,
mode 0600). A sealed check value in the store catches a wrong key at start-up,
before any credential could be mis-decrypted and sent upstream.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import CredentialError
from ..settings.server import MASTER_KEY_ENV, MASTER_KEY_FILE
from ..store.sqlite import Record, Store

_SEALED_PREFIX = "v1:"
_NONCE_BYTES = 12
_AAD = b"mlstream credential v1"
_CHECK_PLAINTEXT = {"check": "mlstream master key"}


class CredentialCodec(Protocol):
    def seal(self, credential: dict[str, str]) -> str: ...

    def unseal(self, sealed: str) -> dict[str, str]: ...


class AESGCMCodec:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise CredentialError("the master key must be 32 bytes (AES-256)")
        self._aead = AESGCM(key)

    def seal(self, credential: dict[str, str]) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = self._aead.encrypt(nonce, json.dumps(credential).encode("utf-8"), _AAD)
        return _SEALED_PREFIX + base64.b64encode(nonce + ciphertext).decode("ascii")

    def unseal(self, sealed: str) -> dict[str, str]:
        if not sealed.startswith(_SEALED_PREFIX):
            raise CredentialError("a stored credential is not sealed with a known scheme")
        try:
            raw = base64.b64decode(sealed[len(_SEALED_PREFIX):], validate=True)
            plaintext = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _AAD)
        except (InvalidTag, binascii.Error, ValueError):
            raise CredentialError("a stored credential could not be decrypted: the master key "
                                  f"({MASTER_KEY_ENV} or {MASTER_KEY_FILE}) is not the one it was "
                                  "stored with") from None
        return json.loads(plaintext)

    def check_value(self) -> str:
        return self.seal(dict(_CHECK_PLAINTEXT))

    def matches(self, check_value: str) -> bool:
        try:
            return self.unseal(check_value) == _CHECK_PLAINTEXT
        except CredentialError:
            return False


def load_master_key(data_dir: Path) -> tuple[bytes, str]:
    """The master key and where it came from (for messages; never the key itself)."""
    encoded = os.environ.get(MASTER_KEY_ENV)
    if encoded is not None:
        return _decode_key(encoded, MASTER_KEY_ENV), MASTER_KEY_ENV
    path = data_dir / MASTER_KEY_FILE
    if not path.exists():
        _create_key_file(path)
    return _decode_key(path.read_text(), str(path)), str(path)


def _create_key_file(path: Path) -> None:
    """Write a new key where nobody can read it half-written: a private file of our own,
    complete, then linked into place. Processes starting together (``--workers``) all
    read the one key that won the link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, draft = tempfile.mkstemp(dir=path.parent, prefix=".master.key.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(base64.b64encode(os.urandom(32)).decode("ascii") + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:  # another process published its key first: use theirs
            pass
    finally:
        os.unlink(draft)


def _decode_key(encoded: str, source: str) -> bytes:
    try:
        key = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialError(f"the master key in {source} is not valid base64") from None
    if len(key) != 32:
        raise CredentialError(f"the master key in {source} must be 32 bytes (base64 of 32 random "
                              f"bytes), got {len(key)}")
    return key


def open_codec(store: Store, data_dir: Path) -> AESGCMCodec:
    """The codec for this store's master key; refuses a key that is not the store's.

    On first use the check value is written; credentials a store kept in the clear
    (written before encryption at rest) are sealed now.
    """
    key, source = load_master_key(data_dir)
    codec = AESGCMCodec(key)
    with store.transaction():
        check = store.get("meta", "master_key_check")
        if check is None:
            store.put("meta", Record("master_key_check", {}, codec.check_value()))
        elif not codec.matches(check.secret or ""):
            raise CredentialError(f"the master key from {source} is not the one this store (data "
                                  f"directory or database) was created with; set {MASTER_KEY_ENV} to the right key")
        for kind in ("connector", "model"):
            for record in store.scan(kind):
                if record.secret and record.secret.startswith("{"):
                    store.put(kind, Record(record.id, record.doc, codec.seal(json.loads(record.secret))))
    return codec
