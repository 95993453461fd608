"""What the fake providers share: one stream plan and its writer; for the Anthropic,
Gemini and SageMaker fakes also one set of knobs.

Those three fakes turn a :class:`Scenario` into the provider's own events (its wire
format is its own module's business) and hand them to :func:`build_plan`, which places
the pauses and the faults. The OpenAI and Bedrock fakes keep the knobs they have always
had and build their :class:`Plan` themselves. :class:`ScriptedHandler` then writes any
plan, one prepared HTTP chunk per event, so a benchmark of the gateway measures the
gateway.

Knobs, chosen per request: the fake's ``default_scenario``, overridden by a ``fake``
object in the JSON request body (each fake says where; SDKs send it as extra body),
overridden in turn by ``X-Fake-*`` headers (``X-Fake-Chunks: 3``; ``tool_use`` as JSON,
``text`` and ``reasoning`` percent-encoded UTF-8).

====================  ===========================================================
knob                  meaning (default)
====================  ===========================================================
``chunks``            number of text deltas (one per word of the text)
``text``              the answer text (:data:`DEFAULT_TEXT`)
``chunk_bytes``       every text delta exactly this many ASCII characters (benchmarks)
``delay_ms``          pause before each text delta after the first (0)
``first_delay_ms``    pause before the response headers (0)
``status``            answer this HTTP status with the provider's error body, before
                      any event (``retry_after``: its ``Retry-After``, for 429/529/503)
``error_after``       after N text deltas send the provider's error event, then end
                      the body properly; 0: it is the very first event
``error_type``        which error (the provider's own name; each fake has a default)
``cut_after``         after N text deltas close the connection mid-body
``tool_use``          ``{"name", "input", "id"}``: a tool call after the text
``reasoning``         thinking streamed before the text, one delta per word
``blocked``           (Gemini) ``"prompt"``: promptFeedback.blockReason SAFETY;
                      ``"response"``: the answer stops with finishReason SAFETY
====================  ===========================================================
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .fake_server import LAST_CHUNK, FakeHandler, http_chunk
from .stats import CounterStats
from .tokens import DEFAULT_TEXT, split_answer

__all__ = ["DEFAULT_TEXT", "Plan", "Scenario", "ScriptedHandler", "ScriptedStats", "build_plan",
           "fake_tokens", "reasoning_words", "scenario_for"]


@dataclass(frozen=True, slots=True)
class Scenario:
    """How a fake answers one request (see the module's table of knobs)."""

    chunks: int | None = None
    text: str | None = None
    chunk_bytes: int | None = None
    delay_ms: float = 0.0
    first_delay_ms: float = 0.0
    status: int | None = None
    retry_after: int = 1
    error_after: int | None = None
    error_type: str | None = None
    cut_after: int | None = None
    tool_use: Mapping[str, Any] | None = None
    reasoning: str | None = None
    blocked: str | None = None

    def __post_init__(self) -> None:
        for name in ("chunks", "chunk_bytes", "error_after", "cut_after", "retry_after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("delay_ms", "first_delay_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.status is not None and (isinstance(self.status, bool) or not isinstance(self.status, int)
                                        or not 400 <= self.status <= 599):
            raise ValueError(f"status must be an HTTP error status, got {self.status!r}")
        for name in ("text", "reasoning", "error_type"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {value!r}")
        if self.chunk_bytes is not None and self.text is not None:
            raise ValueError("text and chunk_bytes cannot be combined")
        if self.error_after is not None and self.cut_after is not None:
            raise ValueError("set at most one of error_after and cut_after")
        if self.blocked not in (None, "prompt", "response"):
            raise ValueError(f'blocked must be "prompt", "response" or null, got {self.blocked!r}')
        if self.tool_use is not None:
            object.__setattr__(self, "tool_use", _tool_use(self.tool_use))

    def with_knobs(self, knobs: Any) -> Scenario:
        """A copy with the JSON-typed ``knobs`` (a body's ``fake`` object) applied."""
        if knobs is None:
            return self
        if not isinstance(knobs, Mapping):
            raise ValueError("the fake knobs must be an object")
        unknown = sorted(set(knobs) - _KNOBS)
        if unknown:
            raise ValueError(f"unknown fake knob(s) {unknown}; known: {sorted(_KNOBS)}")
        return dataclasses.replace(self, **knobs)

    def with_headers(self, headers: Mapping[str, str]) -> Scenario:
        """A copy with ``X-Fake-*`` headers applied (names in any case, ``-`` or ``_``)."""
        knobs: dict[str, Any] = {}
        for name, raw in headers.items():
            if not name.lower().startswith("x-fake-"):
                continue
            knob = name.lower()[len("x-fake-"):].replace("-", "_")
            if knob not in _KNOBS:
                raise ValueError(f"unknown fake knob header {name!r}; known knobs: {sorted(_KNOBS)}")
            knobs[knob] = _header_value(knob, raw)
        return dataclasses.replace(self, **knobs) if knobs else self


_KNOBS = frozenset(field.name for field in dataclasses.fields(Scenario))
_TEXT_KNOBS = frozenset({"text", "reasoning", "error_type", "blocked"})
_FLOAT_KNOBS = frozenset({"delay_ms", "first_delay_ms"})


def _header_value(knob: str, raw: str) -> Any:
    value = raw.strip()
    if knob in _TEXT_KNOBS:
        # http.server decoded the header bytes as Latin-1; percent-encoded UTF-8 is the form.
        return unquote(raw.encode("latin-1", "replace").decode("utf-8", "replace")) or None
    if value.lower() in ("", "null", "none"):
        return None
    try:
        if knob == "tool_use":
            return json.loads(value)
        return float(value) if knob in _FLOAT_KNOBS else int(value)
    except ValueError as exc:
        raise ValueError(f"X-Fake header for {knob}: cannot parse {raw!r}") from exc


def _tool_use(tool_use: Any) -> dict[str, Any]:
    if not isinstance(tool_use, Mapping):
        raise ValueError(f"tool_use must be an object, got {tool_use!r}")
    unknown = sorted(set(tool_use) - {"name", "input", "id"})
    if unknown:
        raise ValueError(f"tool_use has unknown field(s) {unknown}")
    name, tool_input = tool_use.get("name"), tool_use.get("input", {})
    if not isinstance(name, str) or not name:
        raise ValueError("tool_use.name must be a non-empty string")
    if not isinstance(tool_input, Mapping):
        raise ValueError("tool_use.input must be an object")
    call_id = tool_use.get("id", "call_fake0001")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("tool_use.id must be a non-empty string")
    return {"name": name, "input": dict(tool_input), "id": call_id}


def scenario_for(default: Scenario, knobs: Any, headers: Mapping[str, str]) -> Scenario:
    """The scenario of one request: the default, the body's knobs, then the headers."""
    return default.with_knobs(knobs).with_headers(headers)


def fake_tokens(scenario: Scenario) -> list[str]:
    """The text deltas ``scenario`` streams, in order (the same rule as every fake)."""
    return list(split_answer(scenario.chunks, scenario.text, scenario.chunk_bytes))


def reasoning_words(scenario: Scenario) -> list[str]:
    """The reasoning deltas, one per word; empty without ``reasoning``."""
    return [] if scenario.reasoning is None else list(split_answer(None, scenario.reasoning, None))


def tool_input_fragments(tool_input: Mapping[str, Any]) -> list[str]:
    """A tool call's JSON input in three consecutive pieces, as providers stream it."""
    text = json.dumps(tool_input, separators=(",", ":"))
    first, second = len(text) // 3, 2 * len(text) // 3
    return [text[:first], text[first:second], text[second:]]


# -- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a streamed answer writes, ready before the first byte: HTTP chunks, the
    pause before each, and what each counts in the fake's stats (``tallies``: events and
    bytes, see :meth:`ScriptedStats._event_written`). Then the last chunk, or (``cut``)
    a pause of ``cut_pause`` and a hang-up; ``complete`` when the chunks are the whole
    answer."""

    chunks: tuple[bytes, ...]
    pauses: tuple[float, ...]
    tallies: tuple[tuple[int, int], ...]
    complete: bool
    cut: bool = False
    cut_pause: float = 0.0


def build_plan(scenario: Scenario, events: list[tuple[bytes, bool]], error_event: bytes | None) -> Plan:
    """``events``: each encoded event and whether it is a text delta. The scenario's
    pauses go before each text delta after the first; ``error_after``/``cut_after``
    count text deltas (0: before the first event)."""
    delay = scenario.delay_ms / 1000.0
    pauses: list[float] = []
    seen_text = False
    text_positions: list[int] = []
    for index, (_, is_text) in enumerate(events):
        pauses.append(delay if is_text and seen_text else 0.0)
        if is_text:
            seen_text = True
            text_positions.append(index + 1)
    chunks = [http_chunk(data) for data, _ in events]

    def position(after: int) -> int:
        if after == 0 or not text_positions:
            return 0
        return text_positions[min(after, len(text_positions)) - 1]

    if scenario.error_after is not None and error_event is not None:
        at = position(scenario.error_after)
        chunks, pauses = [*chunks[:at], http_chunk(error_event)], [*pauses[:at], 0.0]
        return Plan(tuple(chunks), tuple(pauses), _one_event_each(chunks), complete=False)
    if scenario.cut_after is not None:
        at = position(scenario.cut_after)
        return Plan(tuple(chunks[:at]), tuple(pauses[:at]), _one_event_each(chunks[:at]), complete=False, cut=True)
    return Plan(tuple(chunks), tuple(pauses), _one_event_each(chunks), complete=True)


def _one_event_each(chunks: list[bytes]) -> tuple[tuple[int, int], ...]:
    return tuple((1, len(chunk)) for chunk in chunks)


class ScriptedStats(CounterStats):
    """What a scripted fake did; tests ``wait_for`` these instead of sleeping.

    ``streams_started``/``streams_completed`` (every planned chunk and the last chunk
    written), ``events_written`` (HTTP chunks of a stream), ``auth_failures`` (requests
    refused for their key or signature), ``client_disconnects``, ``connections_closed``.
    """

    COUNTERS = ("streams_started", "streams_completed", "events_written", "bytes_written", "auth_failures",
                "client_disconnects", "connections_closed")

    def _event_written(self, events: int, nbytes: int) -> None:
        """One planned chunk went out: ``events`` and ``nbytes`` are its tally (the one
        update on the per-chunk path: no keyword plumbing)."""
        with self._cond:
            self.events_written += events
            self.bytes_written += nbytes
            self._cond.notify_all()


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as a scripted fake received it: ``headers`` lower-cased, ``body`` the
    parsed JSON (None when it is not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw_body: bytes


class ScriptedHandler(FakeHandler):
    """The writing side of a scripted fake: JSON answers and planned streams. The fake's
    stats need ``_event_written(events, nbytes)`` and the counters ``streams_started``
    and ``streams_completed``."""

    # The header every JSON answer carries a fresh request id in.
    request_id_header = "X-Request-Id"

    def lowered_headers(self) -> dict[str, str]:
        lowered: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            lowered[key] = f"{lowered[key]},{value}" if key in lowered else value
        return lowered

    def send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        self.send_json_bytes(status, json.dumps(payload).encode("utf-8"), headers)

    def send_json_bytes(self, status: int, data: bytes, headers: Mapping[str, str] | None = None) -> None:
        """A JSON answer already encoded."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header(self.request_id_header, str(uuid.uuid4()))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.send(data)

    def whole_answer_fault(self, scenario: Scenario) -> str | None:
        """Take as long as the stream would, then say how a non-stream answer ends:
        ``"cut"`` (hung up already: send nothing), ``"error"`` (send the provider's
        error) or None (send the answer)."""
        self.pause(scenario.delay_ms * max(0, len(fake_tokens(scenario)) - 1) / 1000.0)
        if scenario.cut_after is not None:
            self.hang_up()
            return "cut"
        return "error" if scenario.error_after is not None else None

    def send_plan(self, plan: Plan, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        """A 200 chunked answer of ``content_type`` whose body is ``plan``."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.fake.stats._add(streams_started=1)
        self.write_plan(plan)

    def write_plan(self, plan: Plan) -> None:
        """The body of a chunked answer whose head is out: the plan's chunks, then the last
        chunk or the hang-up."""
        stats: ScriptedStats = self.fake.stats  # type: ignore[assignment]
        # The hot loop: a pause check, one sendall of a prepared chunk, one counter update.
        for chunk, pause, (events, nbytes) in zip(plan.chunks, plan.pauses, plan.tallies, strict=True):
            if pause:
                self.pause(pause)
            self.send(chunk)
            stats._event_written(events, nbytes)
        if plan.cut:
            self.pause(plan.cut_pause)
            self.hang_up()
            return
        self.send(LAST_CHUNK)
        if plan.complete:
            stats._add(streams_completed=1)
