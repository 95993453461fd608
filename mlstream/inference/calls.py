"""The values a call is made of, from a front's request to its answer (``predict`` makes
the calls): what a front asks (``Ask``, ``Bound``), the call checked and rendered
(``Prepared``), a stream ready to start (``PendingStream``), the answers, and the
request's meter for its usage record (``CallMeter``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .. import processing
from ..access.budgets import Admission
from ..access.keys import Caller
from ..caching import NO_CONTROLS, CacheControls
from ..models.connectors import UpstreamRequest
from ..models.registry import ResolvedModel
from ..providers import Dialect, StreamKind
from ..streaming.channel import Channel
from ..telemetry.hooks import RequestTrace
from ..usage.records import UsageRecord, cost_of
from ..usage.tokens import TokenCounts
from .cache import CacheHit, CacheState, Flight, Plan

# A call whose provider sent no counts is recorded as estimated: its input as its request's
# bytes over this (about four characters a token, as OpenAI's guidance for English has it).
ESTIMATED_BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PredictResult:
    body: dict[str, Any]
    upstream_status: int
    upstream_seconds: float  # from sending the request to the last byte of the answer


@dataclass(frozen=True, slots=True)
class ActionAnswer:
    """The answer to one of a connector's other actions (``batch_predict`` and its status
    and cancel calls): the provider's status and ml-commons' output tensors of its body."""

    status: int
    output: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class PendingStream:
    """A stream ready to start. Its writer registers the channel (for hang-ups and
    shutdown) before ``start`` (``reader.start_stream``), which may open the provider
    call on the writer's own thread and raises Overloaded when the pool is full."""

    channel: Channel
    start: Callable[[], None]
    # Called once when the stream is over, however it ended (a router's in-flight count).
    ended: Callable[[], None] | None = None
    # A cache hit's replay: whether its items are a provider's chunks (relayed as they are)
    # rather than pieces (Delta, Reasoning). None: not a replay, the front's own choice holds.
    replay_relays: bool | None = None


Reshape = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(slots=True)
class CallMeter:
    """One request's provider call, for its usage record: who asks (the API key, None while
    no key exists), then what ``prepare`` admitted and what the answer used. The transport
    makes one per request and records it as the request ends (``usage_of``)."""

    caller: Caller | None = None
    request_id: str = ""                # sent to the provider as X-Request-Id, and recorded
    admission: Admission | None = None  # set once a provider call was let through
    model: ResolvedModel | None = None
    interface: str = "-"
    tokens: TokenCounts | None = None   # the provider's own counts, when it sent them
    request_bytes: int = 0              # of the provider request: estimates the input without counts
    recorded: bool = False
    router: str | None = None           # the router model the client named, when it did
    target: str | None = None           # then the target serving (or last tried)
    trace: RequestTrace | None = None   # the request's span (tracing on): its provider calls' parent
    cache_controls: CacheControls = NO_CONTROLS  # what its headers ask of the response cache
    cache: CacheState | None = None     # set once the cache was asked (its x-mlstream-cache header)
    # False: a call made for a request already counted (a semantic cache's embedding), so
    # it takes no place of the rpm; its tokens and cost still count.
    counts_request: bool = True

    def usage(self, *, route: str, status: int, outcome: str, relayed: int, first_token_ms: float | None,
              duration_ms: float) -> UsageRecord | None:
        """The call's usage record, once (None: no provider call was admitted, or already
        recorded). Without the provider's counts, a call that reached the provider is
        estimated: its request's bytes / ESTIMATED_BYTES_PER_TOKEN in, ``relayed`` events out."""
        if self.admission is None or self.recorded:
            return None
        self.recorded = True
        pricing = self.model.pricing if self.model is not None else None
        hit = self.cache.hit if self.cache is not None else None
        if hit is not None:  # no provider call: nothing used, what it saved on the side
            entry = hit.entry
            return self.admission.usage(
                interface=self.interface, route=route, status=status, outcome=outcome,
                first_token_ms=first_token_ms, duration_ms=duration_ms, request_id=self.request_id,
                cost=None if pricing is None else 0.0, cache_hit=True, saved_input_tokens=entry.input_tokens,
                saved_output_tokens=entry.output_tokens, saved_cost=entry.cost)
        tokens, estimated = self.tokens, False
        if tokens is None:
            tokens = TokenCounts()
            if outcome != "error":
                tokens, estimated = TokenCounts(-(-self.request_bytes // ESTIMATED_BYTES_PER_TOKEN), relayed), True
        return self.admission.usage(
            interface=self.interface, route=route, status=status, outcome=outcome, input_tokens=tokens.input,
            output_tokens=tokens.output, cached_input_tokens=tokens.cached_input, estimated=estimated,
            first_token_ms=first_token_ms, duration_ms=duration_ms, request_id=self.request_id,
            cost=cost_of(pricing, tokens.input, tokens.output, tokens.cached_input))


@dataclass(frozen=True, slots=True)
class Ask:
    """What a front asks of a model, before anything is rendered."""

    parameters: Mapping[str, Any]                  # the client's, as sent (escaped here)
    dataset: processing.Dataset | None = None      # ml-commons' text_docs / query_text
    # A front's own request: its fields set on the connector's rendered body (the URL,
    # headers and credentials stay the connector's). None: ml-commons' _predict, whose
    # connector's pre-process function, if any, shapes the parameters instead.
    reshape: Reshape | None = None
    # What a model guardrail asks about when the parameters hold no ``question`` (ml-commons'
    # only input for it): a front's own request names it (OpenAI's: the last user message).
    question: str | None = None


@dataclass(frozen=True, slots=True)
class Bound:
    """A front's request bound to one model (the model named, or a router's target): what
    ``prepare`` takes, the stream kind the front reads, and how it reads a whole answer."""

    ask: Ask
    dialect: Dialect | None = None  # the front's choice (it translated for it); None: chosen by prepare
    kind: StreamKind = StreamKind.TEXT  # how a stream is read
    # A non-stream call: ``Predictor.predict`` or ``exchange`` on the prepared call, and the
    # answer read the front's way (its failure is the target's, a router moves on).
    run: Callable[["Prepared"], Any] = lambda prepared: None


# A front's request for a model: called with the model named, or with each target a
# router tries (the same request translated for each provider).
Bind = Callable[[ResolvedModel], Bound]


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One upstream request of a call: the parameters it was rendered with, and the request."""

    parameters: dict[str, Any]
    request: UpstreamRequest


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call checked and rendered, nothing sent: the one value every front hands on."""

    model: ResolvedModel
    # The provider API, chosen once: by the front, or from the merged parameters
    # (``_llm_interface``) and the connector. None: not known, and not needed (no stream).
    dialect: Dialect | None
    calls: tuple[UpstreamCall, ...]  # in input order; several only when text_docs are split
    stream: bool
    meter: CallMeter | None = None
    # The response cache's part (None: not cached): the plan, the hit that answers the call,
    # or the flight it makes the provider call as.
    plan: Plan | None = None
    hit: CacheHit | None = None
    flight: Flight | None = None

    @property
    def parameters(self) -> dict[str, Any]:
        return self.calls[0].parameters

    @property
    def request(self) -> UpstreamRequest:
        return self.calls[0].request
