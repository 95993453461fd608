"""The response cache: identical requests answered from the store, per tenant.

    plan(model, use, meter)     on for the model (its ``cache``, or the server's default),
                                the request's controls checked against its key: the key
    Predictor.prepare           input guardrails, then ``consult``: an entry (a hit), or the
                                call goes on as the one in flight for its key (the leader),
                                or waits for an identical call in flight and looks again
    the call                    its answer (after output guardrails) stored once complete:
                                a non-stream answer as it is, a stream's pieces as the client
                                got them (``Recording``); a stream cut short is never stored

A semantic cache (``"mode": "semantic"``) looks up by meaning after an exact miss, once the
call is admitted (``match``): the request's conversation (``caching.semantic``) is embedded
through the model's ``embedding_model``, as the caller, and the most similar entry of the
same group (everything else equal) at least ``threshold`` similar is the hit, kept under the
request's own key too, so the same request again is an exact hit. A call that finds none
stores its answer with its vector. An embedding that fails leaves the call uncached by
meaning, never failed.

A hit is replayed to the caller's front: a non-stream answer as it was stored, or built from
a stream's pieces (``CacheUse.answer_of``); a stream from the stored pieces, or from a
non-stream answer's (``CacheUse.pieces_of``), on a channel filled at once, through the
front's own stream events.

Identical misses in flight share one provider call: the first is the leader, the others
wait (at most ``COALESCE_WAIT_SECONDS``) for its entry, then read it. When the leader
stores nothing (it failed, was cut short, or its answer was too big), each waiter looks
once more and, finding nothing, calls the provider itself (one of them becomes the next
leader). A ``no-cache`` request never waits: it calls, then stores.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..caching import CacheConfig, CacheControls, Entry, cache_key, entry_doc, entry_of, normalized_request
from ..caching.semantic import MAX_CANDIDATES, best_match, semantic_split, vector_bytes
from ..errors import Forbidden, MLStreamError
from ..metrics import Metrics
from ..providers.events import Chunk, Delta, Done, Failure, Reasoning, Started, StreamItem
from ..settings.server import ServerSettings
from ..speedups import dumps_json
from ..store.cache_table import CacheTable
from ..streaming.channel import Channel

log = logging.getLogger(__name__)

# A request waits this long at most for an identical one in flight, then calls itself.
COALESCE_WAIT_SECONDS = 300.0
# Rounds of look-up and wait one request makes before calling without the cache's help.
MAX_ROUNDS = 3
Pieces = list[tuple[str, Any]]
# ("d", text or a tool call), ("r", reasoning), ("c", a provider chunk relayed as it came).
PIECE_ITEMS: dict[str, Callable[[Any], StreamItem]] = {"d": Delta, "r": Reasoning, "c": Chunk}
# (embedding model id, text, caller, the request's trace) -> the text's embedding, called as
# the caller, its provider call a span under the request's.
Embed = Callable[[str, str, Any, Any], list[float]]


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What a front tells the cache about one request: the interface it speaks (part of the
    key), its request as it decides the answer, and how its answers convert."""

    interface: str
    # The request as its front read it; normalized (``caching.normalized_request``) only
    # when the model is cached, so a model that is not pays nothing for it.
    request: Mapping[str, Any]
    # The non-stream answer as JSON to store, and back (default: as it is).
    keep: Callable[[Any], Any] = lambda answer: answer
    load: Callable[[Any], Any] = lambda stored: stored
    # A stream's pieces (+ finish reason and usage) as this front's non-stream answer; None:
    # a non-stream request is not served from a stream's entry.
    answer_of: Callable[[Entry], Any] | None = None
    # A non-stream answer (as loaded) as stream pieces, finish reason and usage; None: a
    # stream is not served from a non-stream entry.
    pieces_of: Callable[[Any], tuple[Pieces, str | None, dict[str, int] | None]] | None = None
    # A stream's relayed provider chunks as pieces, finish reason and usage, when they are
    # stored that way (then replayed through the front's translated events; None from it:
    # not storable); None: kept as they came ("c"), replayed as they came.
    chunks: Callable[[list[str | bytes]], tuple[Pieces, str | None, dict[str, int] | None] | None] | None = None


@dataclass(frozen=True, slots=True)
class SemanticPlan:
    """A request of a semantic cache: its conversation, and the group its entry is in."""

    embedding_model: str
    threshold: float
    group: str  # the hash of everything but the conversation: must match exactly
    text: str


@dataclass(frozen=True, slots=True)
class Plan:
    """One request's use of the cache, decided before anything is sent."""

    key: str
    scope: str
    model_id: str
    use: CacheUse
    ttl_s: float
    lookup: bool                  # False: Cache-Control no-cache (refresh)
    max_age: float | None
    semantic: SemanticPlan | None = None
    caller: Any = None            # who embeds the conversation (semantic)


class Flight:
    """One provider call in flight for a key: identical requests wait for its end."""

    def __init__(self, key: str | None) -> None:
        self.key = key  # None: a call of its own (no-cache), nobody waits for it
        self.vector: bytes | None = None  # semantic: the conversation's, kept with the entry
        self._done = threading.Event()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def land(self) -> None:
        self._done.set()


@dataclass(slots=True)
class CacheHit:
    """What a served entry saved, for the call's usage record and headers."""

    entry: Entry
    age_s: float
    similarity: float | None = None  # a semantic hit's cosine similarity


class ResponseCache:
    def __init__(self, table: Callable[[], CacheTable], server: ServerSettings, metrics: Metrics,
                 clock: Callable[[], float] = time.time, embed: Embed | None = None) -> None:
        self._table = table  # the store's cache table, opened on first use
        self._embed = embed  # None: no semantic look-ups (exact only)
        self._default = CacheConfig(ttl_s=server.cache_ttl_s) if server.cache_mode == "exact" else None
        self._max_entry = server.cache_max_entry_bytes
        self._max_bytes = server.cache_max_bytes
        self._metrics = metrics
        self._clock = clock
        self._flights: dict[str, Flight] = {}
        self._lock = threading.Lock()  # guards _flights: a dict lookup or change under it

    # --- deciding ----------------------------------------------------------------------

    def plan(self, model_id: str, config: CacheConfig | None, version: str, use: CacheUse,
             controls: CacheControls, caller: Any) -> tuple[Plan | None, str]:
        """The request's plan and its ``x-mlstream-cache`` status so far (DISABLED, BYPASS;
        "" while it may still hit or miss). Forbidden: a control the key may not use."""
        config = config or self._default
        if config is None or not config.on:
            return None, "DISABLED"
        if caller is not None and caller.key.allowed_cache_controls is not None:
            refused = [name for name in controls.used() if name not in caller.key.allowed_cache_controls]
            if refused:
                raise Forbidden(f"API key [{caller.key.name}] may not use the cache controls "
                                f"[{', '.join(refused)}] (its allowed_cache_controls: "
                                f"[{', '.join(caller.key.allowed_cache_controls)}])")
        if controls.no_store:
            return None, "BYPASS"
        scope = "-" if caller is None else caller.tenant.name
        if caller is not None and config.scope == "key":
            scope += "/key:" + caller.key.key_id
        request = normalized_request(use.request)
        key = cache_key(scope=scope, model_id=model_id, version=version, interface=use.interface,
                        namespace=controls.namespace, request=request)
        semantic = None
        if config.semantic and self._embed is not None and config.embedding_model:
            split = semantic_split(request)
            if split is not None:
                text, rest = split
                group = cache_key(scope=scope, model_id=model_id, version=version, namespace=controls.namespace,
                                  interface=f"{use.interface} semantic {config.embedding_model}", request=rest)
                semantic = SemanticPlan(config.embedding_model, config.threshold, group, text)
        return Plan(key, scope, model_id, use, controls.ttl or config.ttl_s, not controls.no_cache,
                    controls.max_age, semantic, caller), ""

    def consult(self, plan: Plan, stream: bool) -> tuple[CacheHit | None, Flight]:
        """A hit this request can be served, or the flight it makes the provider call as."""
        if not plan.lookup:
            return None, Flight(None)
        for _ in range(MAX_ROUNDS):
            hit = self._lookup(plan, stream)
            if hit is not None:
                return hit, Flight(None)
            with self._lock:
                flight = self._flights.get(plan.key)
                leader = flight is None
                if leader:
                    flight = self._flights[plan.key] = Flight(plan.key)
            if leader:
                # A call that landed between this request's look-up and its flight stored
                # its entry already: look once more rather than call again.
                hit = self._lookup(plan, stream)
                if hit is None:
                    return None, flight
                self.land(plan, flight, None)
                return hit, Flight(None)
            if not flight.wait(COALESCE_WAIT_SECONDS):
                break
        return None, Flight(None)

    def match(self, plan: Plan, flight: Flight, stream: bool, trace: Any = None) -> CacheHit | None:
        """After an exact miss, once the call is admitted (an embedding is a call of the
        caller's: a request refused by its limits makes none): the request's conversation
        embedded, kept on ``flight`` to be stored with the answer, and the most similar entry
        of its group if one is similar enough. A match is also kept under the request's own
        key (without a vector: a match is not matched again), so the same request again is
        an exact hit, and the flight lands with it."""
        if plan.semantic is None:
            return None
        flight.vector = self._embedded(plan, trace)
        if not plan.lookup:
            return None  # a refresh: its answer is stored with its vector
        hit = self._similar(plan, flight.vector, stream)
        if hit is not None:
            flight.vector = None
            self.land(plan, flight, hit.entry)
        return hit

    def _embedded(self, plan: Plan, trace: Any) -> bytes | None:
        """The request's conversation embedded (None: not a semantic request, or it failed)."""
        semantic = plan.semantic
        if semantic is None or self._embed is None:
            return None
        try:
            return vector_bytes(self._embed(semantic.embedding_model, semantic.text, plan.caller, trace))
        except Exception as error:  # noqa: BLE001 - the cache is a help: the call goes on without it
            reason = error.reason if isinstance(error, MLStreamError) else type(error).__name__
            log.warning("response cache: embedding a request through model [%s] failed (%s): no semantic "
                        "look-up", semantic.embedding_model, reason)
            self._metrics.cache_semantic("error")
            return None

    def _similar(self, plan: Plan, vector: bytes | None, stream: bool) -> CacheHit | None:
        """The entry of the request's group most similar to it, if similar enough."""
        assert plan.semantic is not None
        if vector is None:
            return None
        try:
            candidates = self._table().similar(plan.semantic.group, self._clock(), MAX_CANDIDATES)
        except MLStreamError as error:
            log.warning("response cache: the semantic look-up failed (%s): calling the provider", error.reason)
            return None
        match = best_match(vector, candidates, plan.semantic.threshold)
        hit = None if match is None else self._lookup(plan, stream, match[0])
        self._metrics.cache_semantic("miss" if hit is None else "hit")
        if hit is None:
            return None
        return CacheHit(hit.entry, hit.age_s, round(match[1], 4))  # type: ignore[index]

    def _lookup(self, plan: Plan, stream: bool, key: str | None = None) -> CacheHit | None:
        try:
            found = self._table().get(key or plan.key, self._clock())
        except MLStreamError as error:  # the cache is a help: a store that fails it is a miss
            log.warning("response cache: the look-up failed (%s): calling the provider", error.reason)
            return None
        if found is None:
            return None
        doc, created = found
        entry = entry_of(doc, int(created * 1000))
        age = max(0.0, self._clock() - created)
        if entry is None or (plan.max_age is not None and age > plan.max_age):
            return None
        use = plan.use
        servable = (entry.pieces is not None or use.pieces_of is not None) if stream \
            else (entry.answer is not None or use.answer_of is not None)
        return CacheHit(entry, age) if servable else None

    # --- keeping -------------------------------------------------------------------------

    def land(self, plan: Plan, flight: Flight, entry: Entry | None) -> None:
        """The call is over: its entry stored (None: nothing to store), its waiters woken."""
        try:
            if entry is not None:
                self._store(plan, entry, flight.vector)
        finally:
            if flight.key is not None:
                with self._lock:
                    if self._flights.get(flight.key) is flight:
                        del self._flights[flight.key]
            flight.land()

    def _store(self, plan: Plan, entry: Entry, vector: bytes | None) -> None:
        doc = entry_doc(entry)
        try:
            table = self._table()
            if len(dumps_json(doc)) > self._max_entry:
                log.info("response cache: an answer of model [%s] is bigger than cache-max-entry-bytes (%d): "
                         "not stored", plan.model_id, self._max_entry)
                return
            semantic = None if plan.semantic is None or vector is None else (plan.semantic.group, vector)
            entries, size = table.put(plan.key, plan.scope, plan.model_id, doc, plan.ttl_s, self._max_bytes,
                                      self._clock(), semantic)
        except MLStreamError as error:
            log.warning("response cache: storing an answer failed (%s)", error.reason)
            return
        self._metrics.cache_size(entries, size)

    def delete(self, model_id: str | None, scope: str | None) -> int:
        """``DELETE /_plugins/_mlstream/cache``: how many entries went."""
        table = self._table()
        deleted = table.delete(model_id, scope)
        self._metrics.cache_size(*table.stats(self._clock()))
        return deleted

    def stats(self) -> tuple[int, int]:
        entries, size = self._table().stats(self._clock())
        self._metrics.cache_size(entries, size)
        return entries, size

    # --- replaying -------------------------------------------------------------------------

    @staticmethod
    def answer(plan_use: CacheUse, entry: Entry) -> Any:
        """A hit as the front's non-stream answer."""
        if entry.answer is not None:
            return plan_use.load(entry.answer)
        assert plan_use.answer_of is not None  # (``_lookup`` served it only then)
        return plan_use.answer_of(entry)

    @staticmethod
    def replay(plan_use: CacheUse, entry: Entry) -> tuple[Channel, bool]:
        """A hit as a stream: a channel holding every item of it, from Started to Done, and
        whether they are a provider's chunks (relayed) rather than pieces."""
        pieces, finish, usage = entry.pieces, entry.finish_reason, entry.usage
        if pieces is None:
            assert plan_use.pieces_of is not None
            pieces, finish, usage = plan_use.pieces_of(plan_use.load(entry.answer))
        items: list[StreamItem] = [Started()]
        items += [PIECE_ITEMS[kind](value) for kind, value in pieces]
        items.append(Done(finish, usage))
        channel = Channel(len(items))
        channel.put_many(items)
        return channel, any(kind == "c" for kind, _ in pieces)


def stream_entry(use: CacheUse, recording: "Recording", tokens: tuple[int, int], cost: float | None,
                 ) -> Entry | None:
    """A completed stream's entry, from what its client was sent (None: not storable)."""
    if not recording.complete:
        return None
    pieces, finish, usage = recording.pieces, recording.finish_reason, recording.usage
    if recording.chunks:
        if use.chunks is None:
            pieces = [("c", data if isinstance(data, str) else data.decode("utf-8", "replace"))
                      for data in recording.chunks]
        else:
            converted = use.chunks(recording.chunks)
            if converted is None:
                return None
            pieces, finish, usage = converted
    return Entry(None, tuple(pieces), finish, usage, tokens[0], tokens[1], cost)


class Recording:
    """What a stream's client was sent, item by item (``RecordingChannel``), up to a size:
    past ``limit`` bytes of text it is dropped and the stream is not stored."""

    def __init__(self, limit: int) -> None:
        self.pieces: Pieces = []
        self.chunks: list[str | bytes] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, int] | None = None
        self.complete = False
        self._left = limit

    def take(self, item: StreamItem) -> None:
        kind = type(item)
        if self._left < 0:
            return
        if kind is Delta:
            self.pieces.append(("d", item.content))
            self._left -= len(item.content) if isinstance(item.content, str) else 256
        elif kind is Chunk:
            self.chunks.append(item.data)
            self._left -= len(item.data)
        elif kind is Reasoning:
            self.pieces.append(("r", item.text))
            self._left -= len(item.text)
        elif kind is Done:
            self.finish_reason, self.usage, self.complete = item.finish_reason, item.usage, True
        elif kind is Failure:
            self.complete = False
            self._left = -1
        if self._left < 0:
            self.pieces, self.chunks, self.complete = [], [], False


class RecordingChannel(Channel):
    """A channel whose every item read, what its client is sent, is also recorded (a
    leader stream's: a stream's entry is what its client got, after output guardrails)."""

    def __init__(self, capacity: int, recording: Recording) -> None:
        super().__init__(capacity)
        self._take = recording.take

    def get(self, timeout: float | None = None) -> StreamItem | None:
        item = super().get(timeout)
        if item is not None:
            self._take(item)
        return item

    def get_nowait(self) -> StreamItem | None:
        item = super().get_nowait()
        if item is not None:
            self._take(item)
        return item


@dataclass(slots=True)
class CacheState:
    """One request's dealings with the cache (on its ``CallMeter``): its status (HIT, MISS,
    REFRESH, BYPASS, DISABLED) and the hit that served it, if one did."""

    status: str = ""
    hit: CacheHit | None = None

    def headers(self) -> dict[str, str]:
        if not self.status:
            return {}
        out = {"x-mlstream-cache": self.status}
        if self.hit is not None:
            out["Age"] = str(int(self.hit.age_s))
            if self.hit.similarity is not None:
                out["x-mlstream-cache-similarity"] = f"{self.hit.similarity:.4f}"
        return out
