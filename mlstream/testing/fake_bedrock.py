"""A fake Amazon Bedrock runtime on loopback that speaks the real wire protocol.

It answers ``POST /model/{modelId}/converse`` and ``POST /model/{modelId}/converse-stream``
the way ``bedrock-runtime`` does (and ``POST /model/{modelId}/invoke`` for the embedding
models and the Anthropic models of the ml-commons blueprints, ``POST /rerank`` as ``bedrock-agent-runtime``, and,
signed for their own services, Amazon Comprehend's ``DetectDominantLanguage`` /
``DetectSentiment`` and Amazon Textract's ``DetectDocumentText`` by ``X-Amz-Target``;
vectors and scores from ``embeddings``): every request's SigV4 signature is checked (service
``bedrock``), errors carry ``x-amzn-ErrorType`` and a ``{"message": ...}`` body, and
ConverseStream answers are AWS event-stream frames in HTTP/1.1 chunks. The real boto3
``bedrock-runtime`` client works against it unchanged, which is what makes it a fair
stand-in for the gateway's tests and benchmarks.

Usage::

    with FakeBedrock() as fake:
        client = boto3.client("bedrock-runtime", region_name=fake.region, endpoint_url=fake.url,
                              aws_access_key_id=fake.access_key,
                              aws_secret_access_key=fake.secret_key)
        client.converse_stream(modelId="anthropic.claude-3-haiku-20240307-v1:0",
                               messages=[...],
                               additionalModelRequestFields={"fake": {"chunks": 5, "delay_ms": 10}})
        assert fake.stats.wait_for(lambda s: s.streams_completed == 1)

Classes (the server, its lifecycle and the handler's helpers are ``fake_server``'s; JSON
answers and the stream writer are ``scripted``'s)::

    fake_server.FakeHandler
      └─ scripted.ScriptedHandler
           └─ _Handler   routes, SigV4 checks, Converse JSON, ConverseStream frames
    fake_server.FakeServer
      └─ FakeBedrock     credentials, region and default_scenario; a FakeBedrockStats

    FakeBedrockStats     counters under one Condition; tests wait_for() on them
    Scenario             what one answer looks like (tokens, pauses, faults)

Behaviour is chosen per request by a :class:`Scenario`: ``FakeBedrock.default_scenario``,
overridden field by field by the request body's ``additionalModelRequestFields.fake``
object (it passes through boto3 and the gateway untouched), overridden in turn by
``X-Fake-*`` headers (``X-Fake-Delay-Ms: 20``; a ``tool_use`` header holds JSON).

A stream is encoded completely before the first byte is written (a ``scripted.Plan``,
see ``_build_plan``), so the write loop does nothing per frame but one ``sendall`` of
one prepared HTTP chunk and a counter update: a benchmark of the gateway measures the
gateway.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from . import embeddings, scripted, sigv4
from .eventstream import encode_event, encode_exception
from .fake_server import BadBody, FakeServer, http_chunk, json_or_none
from .scripted import Plan, ScriptedHandler
from .stats import MAX_RECORDED_REQUESTS, CounterStats
from .tokens import DEFAULT_TEXT, split_answer

__all__ = [
    "DEFAULT_TEXT",
    "MAX_RECORDED_REQUESTS",
    "STREAM_EXCEPTION_TYPES",
    "FakeBedrock",
    "FakeBedrockStats",
    "RecordedRequest",
    "Scenario",
    "fake_tokens",
]

logger = logging.getLogger(__name__)

#: The exception members of the ConverseStream output event stream (the names boto3
#: reports as the error code of the ``EventStreamError`` it raises).
STREAM_EXCEPTION_TYPES = (
    "modelStreamErrorException",
    "throttlingException",
    "validationException",
    "internalServerException",
    "serviceUnavailableException",
)

SIGNING_SERVICE = "bedrock"
DEFAULT_TOOL_USE_ID = "tooluse_fakeBedrock0001"
THROTTLING_MESSAGE = "Too many requests, please wait before trying again."

_STREAM_EXCEPTION_MESSAGES = {
    "modelStreamErrorException": "The model stream failed (fake Bedrock, as asked).",
    "throttlingException": THROTTLING_MESSAGE,
    "validationException": "The request failed validation mid-stream (fake Bedrock, as asked).",
    "internalServerException": "The server encountered an internal error (fake Bedrock, as asked).",
    "serviceUnavailableException": "The service is unavailable (fake Bedrock, as asked).",
}
# What Converse (not streaming) answers for a scenario that asks for a stream exception.
_CONVERSE_ERRORS = {
    "modelStreamErrorException": (424, "ModelErrorException"),
    "throttlingException": (429, "ThrottlingException"),
    "validationException": (400, "ValidationException"),
    "internalServerException": (500, "InternalServerException"),
    "serviceUnavailableException": (503, "ServiceUnavailableException"),
}

#: The "p" field real Bedrock pads event payloads with; clients must ignore it.
_PADDING_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_ROUTE_RE = re.compile(r"/model/([^/]+)/(converse|converse-stream|invoke)")
# X-Amz-Target prefixes of the JSON-protocol AWS services the fake answers, and the
# SigV4 service name each is signed for.
_TARGET_SERVICES = {"Comprehend_20171127.": "comprehend", "Textract.": "textract"}


# -- scenario ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    """How the fake answers one request. Counts are of text deltas.

    ``chunks``          number of text deltas (default: one per word of the text); see
                        :func:`fake_tokens` for what they hold.
    ``text``            the answer text (default :data:`DEFAULT_TEXT`).
    ``delay_ms``        pause before each delta after the first (text and tool deltas).
    ``chunk_bytes``     every text delta is exactly this many ASCII characters of
                        filler (benchmarks); cannot be combined with ``text``.
    ``first_delay_ms``  pause before the response headers.
    ``throttle``        ``"http"``: answer 429 ThrottlingException before any event.
    ``exception_after`` after N deltas send an ``exception_type`` exception frame and
                        end the body properly; 0 → it is the very first frame.
    ``cut_after``       after N deltas close the connection mid-body.
    ``truncate_after``  after N deltas send the first half of the next frame, then end
                        the body properly.
    ``bad_crc_after``   the frame after N deltas has a corrupted message CRC; the stream
                        then goes on normally (a decoder must not skip it).
    ``tool_use``        ``{"name", "input", "tool_use_id"}``: after the text block a
                        tool-use block at contentBlockIndex 1, and ``stopReason:
                        "tool_use"``.
    ``reasoning``       a text streamed first, one ``reasoningContent`` delta per word
                        (then its signature) in a block of its own at contentBlockIndex 0;
                        the text block and a tool block then move up one index.

    "After N deltas" is the position after ``messageStart`` and N text deltas (N is
    capped at the number of deltas); N = 0 is before ``messageStart``. At most one of
    ``exception_after``, ``cut_after`` and ``truncate_after`` may be set. Invalid
    values raise ``ValueError`` (the fake answers 400 ValidationException).
    """

    chunks: int | None = None
    text: str | None = None
    delay_ms: float = 0.0
    chunk_bytes: int | None = None
    first_delay_ms: float = 0.0
    throttle: str | None = None
    exception_after: int | None = None
    exception_type: str = "modelStreamErrorException"
    cut_after: int | None = None
    truncate_after: int | None = None
    bad_crc_after: int | None = None
    tool_use: Mapping[str, Any] | None = None
    reasoning: str | None = None

    def __post_init__(self) -> None:
        for name in ("chunks", "chunk_bytes", "exception_after", "cut_after", "truncate_after", "bad_crc_after"):
            _check_count(name, getattr(self, name))
        if self.chunk_bytes is not None:
            if self.chunk_bytes < 1:
                raise ValueError(f"chunk_bytes must be at least 1, got {self.chunk_bytes!r}")
            if self.text is not None:
                raise ValueError("text and chunk_bytes cannot be combined")
        for name in ("delay_ms", "first_delay_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        for name in ("text", "reasoning"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {value!r}")
        if self.throttle not in (None, "http"):
            raise ValueError(f'throttle must be "http" or null, got {self.throttle!r}')
        if self.exception_type not in STREAM_EXCEPTION_TYPES:
            raise ValueError(
                f"exception_type must be one of {', '.join(STREAM_EXCEPTION_TYPES)}, "
                f"got {self.exception_type!r}"
            )
        terminal = [n for n in ("exception_after", "cut_after", "truncate_after") if getattr(self, n) is not None]
        if len(terminal) > 1:
            raise ValueError(f"set at most one of exception_after, cut_after, truncate_after (got {terminal})")
        if self.tool_use is not None:
            object.__setattr__(self, "tool_use", _normalise_tool_use(self.tool_use))

    def with_knobs(self, knobs: Mapping[str, Any]) -> Scenario:
        """Return a copy with the JSON-typed ``knobs`` (a body's ``fake`` object) applied."""
        unknown = sorted(set(knobs) - _KNOB_NAMES)
        if unknown:
            raise ValueError(f"unknown fake knob(s) {unknown}; known: {sorted(_KNOB_NAMES)}")
        return dataclasses.replace(self, **knobs)

    def with_headers(self, headers: Mapping[str, str]) -> Scenario:
        """Return a copy with ``X-Fake-*`` headers applied (names in any case, ``-`` or ``_``)."""
        knobs: dict[str, Any] = {}
        for name, raw in headers.items():
            lowered = name.lower()
            if not lowered.startswith("x-fake-"):
                continue
            knob = lowered[len("x-fake-") :].replace("-", "_")
            if knob not in _KNOB_NAMES:
                raise ValueError(f"unknown fake knob header {name!r}; known knobs: {sorted(_KNOB_NAMES)}")
            knobs[knob] = _knob_from_header(knob, raw)
        return dataclasses.replace(self, **knobs) if knobs else self


_KNOB_NAMES = frozenset(f.name for f in dataclasses.fields(Scenario))
_INT_KNOBS = frozenset(
    {"chunks", "chunk_bytes", "exception_after", "cut_after", "truncate_after", "bad_crc_after"}
)
_FLOAT_KNOBS = frozenset({"delay_ms", "first_delay_ms"})


def _check_count(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _knob_from_header(knob: str, raw: str) -> Any:
    value = raw.strip()
    if knob == "text":
        # Percent-encoded UTF-8, as for the fake OpenAI provider. http.server decoded
        # the header bytes as Latin-1; undo that first in case raw UTF-8 was sent.
        return unquote(raw.encode("latin-1", "replace").decode("utf-8", "replace"))
    if value.lower() in ("", "null", "none"):
        return None
    try:
        if knob in _INT_KNOBS:
            return int(value)
        if knob in _FLOAT_KNOBS:
            return float(value)
        if knob == "tool_use":
            return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"X-Fake header for {knob}: cannot parse {raw!r}") from exc
    return value


def _normalise_tool_use(tool_use: Any) -> dict[str, Any]:
    if not isinstance(tool_use, Mapping):
        raise ValueError(f"tool_use must be an object, got {tool_use!r}")
    unknown = sorted(set(tool_use) - {"name", "input", "tool_use_id"})
    if unknown:
        raise ValueError(f"tool_use has unknown field(s) {unknown}")
    name = tool_use.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("tool_use.name must be a non-empty string")
    tool_input = tool_use.get("input", {})
    if not isinstance(tool_input, Mapping):
        raise ValueError("tool_use.input must be an object")
    tool_use_id = tool_use.get("tool_use_id", DEFAULT_TOOL_USE_ID)
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise ValueError("tool_use.tool_use_id must be a non-empty string")
    return {"name": name, "input": dict(tool_input), "tool_use_id": tool_use_id}


def fake_tokens(scenario: Scenario) -> list[str]:
    """Return the text deltas ``scenario`` streams, in order; ``"".join`` of them is
    the full answer text (what Converse returns). Deterministic, and the same rules as
    the fake OpenAI provider's: :func:`mlstream.testing.tokens.split_answer`.
    """
    return list(split_answer(scenario.chunks, scenario.text, scenario.chunk_bytes))


def _tool_input_fragments(tool_use: Mapping[str, Any]) -> list[str]:
    """The tool input JSON in three consecutive pieces (some empty for tiny inputs)."""
    text = json.dumps(tool_use["input"], separators=(",", ":"))
    first, second = len(text) // 3, 2 * len(text) // 3
    return [text[:first], text[first:second], text[second:]]


# -- recorded requests and stats --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRequest(scripted.RecordedRequest):
    """One request as the fake received it (recorded before its signature is checked).

    ``path`` is the request target exactly as sent (percent-encoding intact);
    ``headers`` are lower-cased (repeats joined with ``,``); ``body`` is the parsed JSON
    or None when the body is not JSON; ``model_id`` is the decoded model id for a
    recognised route; ``operation`` is ``"converse"``, ``"converse-stream"`` or None.
    """

    model_id: str | None
    operation: str | None


class FakeBedrockStats(CounterStats):
    """Counters of what the fake did, safe to read from any thread; every update
    notifies, so a test waits for an effect with :meth:`wait_for` instead of sleeping.

    ``requests``             RecordedRequests in arrival order (the latest
                             MAX_RECORDED_REQUESTS, so a long benchmark stays bounded)
    ``signature_failures``   requests refused with 403 (reasons in
                             ``signature_failure_reasons``)
    ``streams_started``      ConverseStream answers whose 200 headers went out
    ``streams_completed``    ...whose every frame through ``metadata`` and the last chunk
                             were written (bad_crc_after counts; exception_after,
                             truncate_after and cut_after do not)
    ``frames_written``       whole event-stream frames written (a truncated half is not)
    ``bytes_written``        event-stream bytes written (HTTP chunk framing excluded)
    ``client_disconnects``   a write failed or the peer closed while the fake paused
    ``connections_open``     connections open now (a gauge; ``reset`` leaves it alone)
    ``connections_closed``   connections closed so far
    """

    COUNTERS = ("signature_failures", "streams_started", "streams_completed", "frames_written",
                "bytes_written", "client_disconnects", "connections_closed")

    def __init__(self) -> None:
        super().__init__()
        self.signature_failure_reasons: list[str] = []

    def _reset_extra(self) -> None:
        self.signature_failure_reasons = []

    def _event_written(self, frames: int, frame_bytes: int) -> None:
        # The one update on the per-frame path (a plan's tally: whole frames in the
        # chunk, frame bytes): no keyword plumbing.
        with self._cond:
            self.frames_written += frames
            self.bytes_written += frame_bytes
            self._cond.notify_all()

    def _record_signature_failure(self, reason: str) -> None:
        with self._cond:
            self.signature_failures += 1
            self.signature_failure_reasons.append(reason)
            self._cond.notify_all()


# -- the pre-encoded stream -------------------------------------------------------------


def _padding(index: int) -> str:
    # Real payloads carry a "p" of varying length; vary ours so frame sizes vary too.
    return _PADDING_ALPHABET[: 1 + (index * 7) % len(_PADDING_ALPHABET)]


def _corrupt_crc(frame: bytes) -> bytes:
    return frame[:-1] + bytes([frame[-1] ^ 0xFF])


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens,
    }


def _latency_ms(scenario: Scenario, deltas: int) -> int:
    return max(1, int(scenario.first_delay_ms + scenario.delay_ms * max(0, deltas - 1)))


def _build_plan(scenario: Scenario, input_tokens: int) -> Plan:
    """A ConverseStream answer: one frame per HTTP chunk, each tallied as (whole frames
    in it, frame bytes) for ``frames_written``/``bytes_written``."""
    tokens = fake_tokens(scenario)
    tool = scenario.tool_use
    fragments = _tool_input_fragments(tool) if tool is not None else []
    delay = scenario.delay_ms / 1000.0
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    index = 0
    if scenario.reasoning is not None:
        events += [("contentBlockDelta", {"delta": {"reasoningContent": {"text": word}}, "contentBlockIndex": 0})
                   for word in split_answer(None, scenario.reasoning, None)]
        events.append(("contentBlockDelta", {"delta": {"reasoningContent": {"signature": "fake-signature"}},
                                             "contentBlockIndex": 0}))
        events.append(("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    reasoning_frames = len(events) - 1
    events += [("contentBlockDelta", {"delta": {"text": token}, "contentBlockIndex": index}) for token in tokens]
    events.append(("contentBlockStop", {"contentBlockIndex": index}))
    if tool is not None:
        start = {"toolUse": {"toolUseId": tool["tool_use_id"], "name": tool["name"]}}
        events.append(("contentBlockStart", {"start": start, "contentBlockIndex": index + 1}))
        events += [
            ("contentBlockDelta", {"delta": {"toolUse": {"input": fragment}}, "contentBlockIndex": index + 1})
            for fragment in fragments
        ]
        events.append(("contentBlockStop", {"contentBlockIndex": index + 1}))
    events.append(("messageStop", {"stopReason": "tool_use" if tool is not None else "end_turn"}))
    deltas = len(tokens) + len(fragments)
    metadata = {
        "usage": _usage(input_tokens, deltas),
        "metrics": {"latencyMs": _latency_ms(scenario, deltas)},
    }
    events.append(("metadata", metadata))

    frames = [
        encode_event(name, {**payload, "p": _padding(index)}) for index, (name, payload) in enumerate(events)
    ]
    pauses, seen_delta = [], False
    for name, _ in events:
        is_delta = name == "contentBlockDelta"
        pauses.append(delay if is_delta and seen_delta else 0.0)
        seen_delta = seen_delta or is_delta

    def position(after: int) -> int:
        return 0 if after == 0 else 1 + reasoning_frames + min(after, len(tokens))

    if scenario.bad_crc_after is not None:
        at = position(scenario.bad_crc_after)
        frames[at] = _corrupt_crc(frames[at])
    tallies = [(1, len(frame)) for frame in frames]
    if scenario.exception_after is not None:
        at = position(scenario.exception_after)
        message = _STREAM_EXCEPTION_MESSAGES[scenario.exception_type]
        frame = encode_exception(scenario.exception_type, message)
        return _plan([*frames[:at], frame], pauses[:at + 1], [*tallies[:at], (1, len(frame))], complete=False)
    if scenario.truncate_after is not None:
        at = position(scenario.truncate_after)
        half = frames[at][: len(frames[at]) // 2]
        return _plan([*frames[:at], half], pauses[:at + 1], [*tallies[:at], (0, len(half))], complete=False)
    if scenario.cut_after is not None:
        at = position(scenario.cut_after)
        return _plan(frames[:at], pauses[:at], tallies[:at], complete=False, cut=True, cut_pause=pauses[at])
    return _plan(frames, pauses, tallies, complete=True)


def _plan(frames: list[bytes], pauses: list[float], tallies: list[tuple[int, int]], **ending: Any) -> Plan:
    return Plan(tuple(http_chunk(frame) for frame in frames), tuple(pauses), tuple(tallies), **ending)


class _PlanCache:
    """Plans by scenario, so a benchmark repeating one scenario encodes it once.

    Bounded in entries and in the size of a plan worth keeping: a scenario with
    megabytes of filler is cheaper to re-encode than to pin in memory.
    """

    MAX_ENTRIES = 64
    MAX_PLAN_BYTES = 4 * 1024 * 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[tuple[str, int], Plan] = {}

    def get(self, scenario: Scenario, input_tokens: int) -> Plan:
        key = (json.dumps(dataclasses.asdict(scenario), sort_keys=True), input_tokens)
        with self._lock:
            plan = self._plans.get(key)
        if plan is not None:
            return plan
        plan = _build_plan(scenario, input_tokens)
        if sum(len(chunk) for chunk in plan.chunks) <= self.MAX_PLAN_BYTES:
            with self._lock:
                if len(self._plans) >= self.MAX_ENTRIES:
                    del self._plans[next(iter(self._plans))]  # the oldest
                self._plans[key] = plan
        return plan


_plans = _PlanCache()


def _count_input_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic stand-in for token counting: words of text in messages and system."""
    words = 0
    blocks: list[Any] = []
    for message in body.get("messages") or []:
        if isinstance(message, Mapping) and isinstance(message.get("content"), list):
            blocks += message["content"]
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for block in blocks:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            words += len(block["text"].split())
    return max(1, words)


# -- the HTTP side ----------------------------------------------------------------------


class _Handler(ScriptedHandler):
    server_version = "FakeBedrock/1.0"
    request_id_header = "x-amzn-RequestId"
    fake: FakeBedrock

    def serve(self) -> None:
        fake = self.fake
        try:
            raw_body = self.read_body()
        except BadBody as error:
            self._send_error(error.status, "ValidationException", error.reason)
            return
        headers = self.lowered_headers()
        path, _, query = self.path.partition("?")
        route = _ROUTE_RE.fullmatch(path)
        model_id = unquote(route.group(1)) if route else None
        operation = route.group(2) if route else ("rerank" if path == "/rerank" else None)
        target = headers.get("x-amz-target", "")
        service = next((name for prefix, name in _TARGET_SERVICES.items() if target.startswith(prefix)),
                       SIGNING_SERVICE)
        body = json_or_none(raw_body)
        fake.stats._record(
            RecordedRequest(self.command, self.path, headers, body, raw_body, model_id, operation)
        )

        # http.server decoded the request line as Latin-1; give the verifier the text
        # those bytes spell in UTF-8, which is how a signer saw the path.
        wire_path = path.encode("latin-1").decode("utf-8", "surrogateescape")
        result = sigv4.verify(
            self.command,
            wire_path,
            query,
            headers,
            raw_body,
            access_key=fake.access_key,
            secret_key=fake.secret_key,
            region=fake.region,
            service=service,
            session_token=fake.session_token,
        )
        if not result.ok:
            logger.debug("fake Bedrock: signature refused: %s", result.reason)
            fake.stats._record_signature_failure(result.reason)
            self._send_error(403, result.error_type, _signature_failure_message(result))
            return
        if service != SIGNING_SERVICE and path == "/" and self.command == "POST":
            self._aws_json_service(target, body)
            return
        if operation is None or self.command != "POST":
            self._send_error(404, "ResourceNotFoundException", f"No route for {self.command} {path}")
            return
        if not isinstance(body, dict):
            self._send_error(400, "ValidationException", "The request body must be a JSON object.")
            return
        if operation in ("invoke", "rerank"):
            self._invoke(operation, model_id, body, headers)
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._send_error(400, "ValidationException", "messages: a non-empty array of messages is required.")
            return
        try:
            scenario = _scenario_for(fake.default_scenario, body, headers)
        except ValueError as error:
            self._send_error(400, "ValidationException", f"fake Bedrock scenario: {error}")
            return
        if scenario.throttle == "http":
            self._send_error(429, "ThrottlingException", THROTTLING_MESSAGE)
            return
        if operation == "converse":
            self._converse(scenario, body)
        else:
            self._converse_stream(scenario, body)

    def _invoke(self, operation: str, model_id: str | None, body: dict[str, Any],
                headers: Mapping[str, str]) -> None:
        """InvokeModel (embedding models, Anthropic's Messages API) and Rerank. Faults from ``X-Fake-*`` headers:
        ``throttle`` (429), ``first_delay_ms``, ``exception_after: 0`` with an
        ``exception_type`` (its Converse status), ``cut_after: 0`` (hang up)."""
        try:
            scenario = self.fake.default_scenario.with_headers(headers)
        except ValueError as error:
            self._send_error(400, "ValidationException", f"fake Bedrock scenario: {error}")
            return
        self.pause(scenario.first_delay_ms / 1000.0)
        if scenario.throttle == "http":
            self._send_error(429, "ThrottlingException", THROTTLING_MESSAGE)
            return
        if scenario.exception_after is not None:
            status, error_type = _CONVERSE_ERRORS[scenario.exception_type]
            self._send_error(status, error_type, _STREAM_EXCEPTION_MESSAGES[scenario.exception_type])
            return
        if scenario.cut_after is not None:
            self.hang_up()
            return
        try:
            if operation == "rerank":
                answer = embeddings.bedrock_rerank(body)
            elif "anthropic." in (model_id or ""):   # also inference profiles: us.anthropic....
                answer = json.dumps(_anthropic_message(model_id or "", scenario, body)).encode()
            else:
                answer = embeddings.bedrock_invoke(model_id or "", body)
        except (embeddings.EmbeddingRequestError, ValueError) as error:
            self._send_error(400, "ValidationException", str(error))
            return
        self.send_json_bytes(200, answer)

    def _aws_json_service(self, target: str, body: Any) -> None:
        """Comprehend and Textract, enough for their ml-commons blueprints."""
        if not isinstance(body, dict):
            self._send_error(400, "SerializationException", "The request body must be a JSON object.")
            return
        operation = target.split(".", 1)[1] if "." in target else ""
        if operation in ("DetectDominantLanguage", "DetectSentiment") and isinstance(body.get("Text"), str):
            text = body["Text"]
            if operation == "DetectDominantLanguage":
                answer = {"Languages": [{"LanguageCode": _fake_language(text), "Score": 0.99}]}
            else:
                answer = {"Sentiment": "NEUTRAL", "SentimentScore": {
                    "Positive": 0.1, "Negative": 0.1, "Neutral": 0.75, "Mixed": 0.05}}
            self.send_json(200, answer)
            return
        if operation == "DetectDocumentText" and isinstance(body.get("Document"), dict):
            blob = body["Document"].get("Bytes")
            if not isinstance(blob, str) or not blob:
                self._send_error(400, "InvalidParameterException", "Document.Bytes is required.")
                return
            line = {"BlockType": "LINE", "Confidence": 99.5, "Text": f"fake text of {len(blob)} base64 bytes",
                    "Id": str(uuid.uuid5(uuid.NAMESPACE_OID, blob))}
            self.send_json(200, {"DocumentMetadata": {"Pages": 1},
                                  "Blocks": [{"BlockType": "PAGE", "Id": "page-1"}, line],
                                  "DetectDocumentTextModelVersion": "1.0"})
            return
        self._send_error(400, "ValidationException", f"fake AWS service: unsupported target {target!r}")

    def _converse(self, scenario: Scenario, body: Mapping[str, Any]) -> None:
        tokens = fake_tokens(scenario)
        # Converse answers after the whole generation: the first pause and every gap.
        generation = scenario.first_delay_ms + scenario.delay_ms * max(0, len(tokens) - 1)
        self.pause(generation / 1000.0)
        if scenario.cut_after is not None:
            self.hang_up()
            return
        if scenario.exception_after is not None:
            status, error_type = _CONVERSE_ERRORS[scenario.exception_type]
            self._send_error(status, error_type, _STREAM_EXCEPTION_MESSAGES[scenario.exception_type])
            return
        content: list[dict[str, Any]] = [{"text": "".join(tokens)}]
        if scenario.reasoning is not None:
            content.insert(0, {"reasoningContent": {"reasoningText": {"text": scenario.reasoning,
                                                                      "signature": "fake-signature"}}})
        output_tokens = len(tokens)
        tool = scenario.tool_use
        if tool is not None:
            tool_block = {"toolUseId": tool["tool_use_id"], "name": tool["name"], "input": tool["input"]}
            content.append({"toolUse": tool_block})
            output_tokens += len(_tool_input_fragments(tool))
        answer = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if tool is not None else "end_turn",
            "usage": _usage(_count_input_tokens(body), output_tokens),
            "metrics": {"latencyMs": _latency_ms(scenario, len(tokens))},
        }
        self.send_json(200, answer)

    def _converse_stream(self, scenario: Scenario, body: Mapping[str, Any]) -> None:
        plan = _plans.get(scenario, _count_input_tokens(body))
        self.pause(scenario.first_delay_ms / 1000.0)
        self.send_plan(plan, "application/vnd.amazon.eventstream", {"x-amzn-RequestId": str(uuid.uuid4())})

    def _send_error(self, status: int, error_type: str, message: str) -> None:
        self.send_json(status, {"message": message}, {"x-amzn-ErrorType": error_type})


def _anthropic_message(model_id: str, scenario: Scenario, body: Mapping[str, Any]) -> dict[str, Any]:
    """InvokeModel of an Anthropic model, the scenario's text: the Messages API on Bedrock,
    or the legacy Text Completions API (a ``prompt``, Claude v2)."""
    tokens = fake_tokens(scenario)
    if "prompt" in body:
        if not isinstance(body["prompt"], str) or type(body.get("max_tokens_to_sample")) is not int:
            raise ValueError("prompt (a string) and max_tokens_to_sample (an integer) are required")
        return {"type": "completion", "completion": " " + "".join(tokens), "stop_reason": "stop_sequence",
                "stop": "\n\nHuman:"}
    if not isinstance(body.get("anthropic_version"), str):
        raise ValueError("anthropic_version: a string is required")
    if type(body.get("max_tokens")) is not int or body["max_tokens"] < 1:
        raise ValueError("max_tokens: a positive integer is required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty array of messages is required")
    return {"id": f"msg_bdrk_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model_id,
            "content": [{"type": "text", "text": "".join(tokens)}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": _count_input_tokens(body), "output_tokens": len(tokens)}}


def _fake_language(text: str) -> str:
    """A language code good enough for tests: a few common words decide, else English."""
    words = set(text.lower().split())
    for code, markers in (("fr", {"le", "la", "les", "est", "bonjour"}), ("de", {"der", "die", "das", "ist"}),
                          ("es", {"el", "los", "es", "hola"})):
        if words & markers:
            return code
    return "en"


def _scenario_for(default: Scenario, body: Mapping[str, Any], headers: Mapping[str, str]) -> Scenario:
    scenario = default
    extra = body.get("additionalModelRequestFields")
    if extra is not None:
        if not isinstance(extra, Mapping):
            raise ValueError("additionalModelRequestFields must be an object")
        knobs = extra.get("fake")
        if knobs is not None:
            if not isinstance(knobs, Mapping):
                raise ValueError("additionalModelRequestFields.fake must be an object")
            scenario = scenario.with_knobs(knobs)
    return scenario.with_headers(headers)


def _signature_failure_message(result: sigv4.VerifyResult) -> str:
    if result.error_type == sigv4.INVALID_SIGNATURE and result.canonical_request:
        # AWS front ends show what they computed; so do we, it is what a signer needs.
        return (
            f"{sigv4.SIGNATURE_MISMATCH_MESSAGE}\n\n"
            f"The Canonical String for this request should have been\n'{result.canonical_request}'\n\n"
            f"The String-to-Sign should have been\n'{result.string_to_sign}'\n"
        )
    if result.error_type == sigv4.UNRECOGNIZED_CLIENT:
        return f"The security token included in the request is invalid. ({result.reason})"
    if result.error_type == sigv4.MISSING_TOKEN:
        return "Missing Authentication Token"
    return f"{sigv4.SIGNATURE_MISMATCH_MESSAGE} ({result.reason})"


# -- the public object ------------------------------------------------------------------


class FakeBedrock(FakeServer):
    """A Bedrock runtime on loopback. Use as a context manager, or start()/stop()
    (see :class:`FakeServer`).

    ``default_scenario`` (settable at any time) shapes answers whose request does not
    say otherwise. ``stats`` records what happened.
    """

    handler = _Handler
    stats: FakeBedrockStats

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        access_key: str = "AKIDFAKEBEDROCK",
        secret_key: str = "fake-secret-key",
        session_token: str | None = None,
        region: str = "us-east-1",
    ) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.session_token = session_token
        self.region = region
        self.default_scenario = Scenario()
        super().__init__(host=host, port=port, stats=FakeBedrockStats())
