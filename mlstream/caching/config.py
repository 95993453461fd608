"""What the response cache decides from, pure and I/O-free.

    model field   "cache": {"mode": "exact" | "semantic" | "off", "ttl_s": 3600, "scope": "tenant" | "key",
                            "embedding_model": id, "threshold": 0.95}   (the last two: semantic)
    request       Cache-Control: no-cache | no-store | max-age=N     (RFC 9111's request directives)
                  x-mlstream-cache-ttl: N          seconds the entry this call stores is kept
                  x-mlstream-cache-namespace: s    a partition inside the caller's tenant
    key           SHA-256 of the canonical JSON of {scope, model, its config version, the
                  front's interface, the namespace, the normalized request}

The scope is the caller's tenant (or its key, with ``"scope": "key"``): entries of two
tenants can never meet, whatever a request says. The normalized request is the front's
request without what does not change the answer (``stream``, ``stream_options``, ``user``,
``metadata``, the model's name: the resolved model is in the key), so a stream request and
a non-stream one for the same thing share an entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import BadRequest

MODES = ("exact", "semantic", "off")
SCOPES = ("tenant", "key")
# Fields of a request that never change what the model answers.
IGNORED_FIELDS = frozenset({"model", "stream", "stream_options", "user", "metadata", "store",
                            "safety_identifier", "prompt_cache_key", "service_tier"})
# The controls a key may be limited to (``allowed_cache_controls``).
CACHE_CONTROLS = ("no-cache", "no-store", "max-age", "ttl", "namespace")
MAX_NAMESPACE = 128
_NAMESPACE = re.compile(r"^[A-Za-z0-9._:/-]{1,128}$")
ENTRY_VERSION = 1
DEFAULT_THRESHOLD = 0.95


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """A model's cache (or the server's default): on when ``mode`` is "exact" or
    "semantic" (exact first, then by meaning through ``embedding_model``)."""

    mode: str = "exact"
    ttl_s: float = 3600.0
    scope: str = "tenant"
    embedding_model: str | None = None  # semantic: the model that embeds the conversation
    threshold: float = DEFAULT_THRESHOLD  # semantic: the least cosine similarity served

    @property
    def on(self) -> bool:
        return self.mode != "off"

    @property
    def semantic(self) -> bool:
        return self.mode == "semantic"

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"mode": self.mode, "ttl_s": self.ttl_s, "scope": self.scope}
        if self.semantic:
            doc.update(embedding_model=self.embedding_model, threshold=self.threshold)
        return doc


def parse_cache(value: Any) -> CacheConfig:
    """A model's ``cache`` field, checked."""
    if not isinstance(value, dict):
        raise BadRequest('[cache] must be an object such as {"mode": "exact", "ttl_s": 3600}')
    unknown = sorted(set(value) - {"mode", "ttl_s", "scope", "embedding_model", "threshold"})
    if unknown:
        raise BadRequest(f"[cache] takes mode, ttl_s, scope, embedding_model and threshold; got [{', '.join(unknown)}]")
    mode = value.get("mode", "exact")
    if mode not in MODES:
        raise BadRequest(f"[cache.mode] must be one of {', '.join(MODES)}")
    ttl = value.get("ttl_s", 3600)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise BadRequest("[cache.ttl_s] must be a number of seconds greater than 0")
    scope = value.get("scope", "tenant")
    if scope not in SCOPES:
        raise BadRequest(f"[cache.scope] must be one of {', '.join(SCOPES)}")
    if mode != "semantic":
        extra = [name for name in ("embedding_model", "threshold") if name in value]
        if extra:
            raise BadRequest(f"[cache.{extra[0]}] is a setting of \"mode\": \"semantic\" only")
        return CacheConfig(mode, float(ttl), scope)
    embedding = value.get("embedding_model")
    if not isinstance(embedding, str) or not embedding.strip():
        raise BadRequest('[cache.embedding_model] is required with "mode": "semantic": the id of an embedding '
                         "model that embeds the conversation")
    threshold = value.get("threshold", DEFAULT_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise BadRequest("[cache.threshold] must be a cosine similarity greater than 0 and at most 1")
    return CacheConfig(mode, float(ttl), scope, embedding, float(threshold))


@dataclass(frozen=True, slots=True)
class CacheControls:
    """What one request asks of the cache."""

    no_cache: bool = False       # refresh: skip the lookup, store the answer
    no_store: bool = False       # neither look up nor store
    max_age: float | None = None  # an entry older than this is not used
    ttl: float | None = None     # the stored entry's lifetime instead of the model's
    namespace: str = ""

    def used(self) -> list[str]:
        """The controls this request uses, by their ``allowed_cache_controls`` names."""
        flags = (("no-cache", self.no_cache), ("no-store", self.no_store), ("max-age", self.max_age is not None),
                 ("ttl", self.ttl is not None), ("namespace", bool(self.namespace)))
        return [name for name, used in flags if used]


NO_CONTROLS = CacheControls()


def parse_controls(cache_control: str | None, ttl: str | None, namespace: str | None) -> CacheControls:
    """The request's ``Cache-Control``, ``x-mlstream-cache-ttl`` and ``-namespace`` headers.
    Directives a cache does not act on (``no-transform``, ``only-if-cached``, ...) are
    ignored, as RFC 9111 lets a cache do."""
    if not (cache_control or ttl or namespace):
        return NO_CONTROLS
    no_cache = no_store = False
    max_age: float | None = None
    for directive in (cache_control or "").split(","):
        name, _, argument = directive.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            no_cache = True
        elif name == "no-store":
            no_store = True
        elif name == "max-age":
            max_age = _seconds("Cache-Control max-age", argument.strip().strip('"'), zero=True)
    ttl_s = None if ttl is None else _seconds("x-mlstream-cache-ttl", ttl.strip(), zero=False)
    space = (namespace or "").strip()
    if space and not _NAMESPACE.match(space):
        raise BadRequest(f"x-mlstream-cache-namespace must be 1 to {MAX_NAMESPACE} of A-Z a-z 0-9 . _ : / -")
    return CacheControls(no_cache, no_store, max_age, ttl_s, space)


def _seconds(what: str, text: str, *, zero: bool) -> float:
    if not text.isdigit() or (not zero and int(text) == 0):
        raise BadRequest(f"{what} must be a whole number of seconds{'' if zero else ' greater than 0'}, "
                         f"got [{text[:40]}]")
    return float(text)


def normalized_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """A front's request as it decides the answer: every field but ``IGNORED_FIELDS``."""
    return {name: value for name, value in body.items() if name not in IGNORED_FIELDS}


def cache_key(*, scope: str, model_id: str, version: str, interface: str, namespace: str,
              request: Mapping[str, Any]) -> str:
    """The entry's key: SHA-256 (hex) of the canonical JSON of what decides the answer."""
    material = {"scope": scope, "model": model_id, "version": version, "interface": interface,
                "namespace": namespace, "request": request}
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Entry:
    """A completed answer as the cache keeps it: the front's non-stream answer when a
    non-stream call made it, the stream's pieces when a stream did (("d", text or a tool
    call) and ("r", reasoning) in the order they came), how it ended, and what it cost."""

    answer: Any = None                        # JSON: the front's answer (a dict, or its JSON text)
    pieces: tuple[tuple[str, Any], ...] | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None       # the provider's counts under its names
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    created_ms: int = 0


def entry_doc(entry: Entry) -> dict[str, Any]:
    return {"v": ENTRY_VERSION, "answer": entry.answer,
            "pieces": None if entry.pieces is None else [list(piece) for piece in entry.pieces],
            "finish_reason": entry.finish_reason, "usage": entry.usage, "input_tokens": entry.input_tokens,
            "output_tokens": entry.output_tokens, "cost": entry.cost}


def entry_of(doc: Mapping[str, Any], created_ms: int) -> Entry | None:
    """A stored entry, or None for one this version cannot read (then it is a miss)."""
    if not isinstance(doc, Mapping) or doc.get("v") != ENTRY_VERSION:
        return None
    pieces = doc.get("pieces")
    return Entry(doc.get("answer"), None if pieces is None else tuple((kind, value) for kind, value in pieces),
                 doc.get("finish_reason"), doc.get("usage"), int(doc.get("input_tokens") or 0),
                 int(doc.get("output_tokens") or 0), doc.get("cost"), created_ms)
