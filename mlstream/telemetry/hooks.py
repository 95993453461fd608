"""What the rest of the code calls when telemetry is on: the hooks' types. Imports nothing
of OpenTelemetry (``otel`` implements them) and nothing at run time but the errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from ..errors import MLStreamError

if TYPE_CHECKING:
    from ..models.connectors import Connector, UpstreamRequest
    from ..providers.base import StreamDecoder

Opened = TypeVar("Opened")


class CancelledStream(Protocol):
    """What a call's trace reads of its stream's channel when the reader stopped early."""

    @property
    def cancel_reason(self) -> MLStreamError | None: ...


class RequestTrace(Protocol):
    """One HTTP request's SERVER span."""

    def routed(self, template: str, model_id: str | None) -> None:
        """The route matched: the span's name and ``http.route`` (ids templated)."""

    def stream_ended(self, outcome: str, failure: MLStreamError | None = None) -> None:
        """A stream's outcome (completed, failed, refused, client_gone) before ``end``; a
        failed one's error (the final error event's)."""

    def end(self, status: int) -> None:
        """The request is over (its stream included); ``status`` 0: nothing was answered."""


class CallTrace(Protocol):
    """One provider call's CLIENT span and metrics. ``ProviderCall`` calls these; the span
    ends once, when the call's answer has been read whole, its stream ended, or it failed."""

    def open(self, open_response: Callable[[Any], Opened], wait: Any) -> Opened:
        """Start the span and open the call (``open_response(wait)``), ending it on failure."""

    def attempt(self, request: UpstreamRequest) -> UpstreamRequest:
        """One attempt's request, carrying this span's traceparent (before it is signed)."""

    def retried(self, status: int) -> None:
        """An attempt answered ``status`` and is retried (an event on the span)."""

    def read_whole(self, read: Callable[[Any], bytes], response: Any) -> bytes:
        """Read a whole answer (``read(response)``) and end the span with it."""

    def failed(self, error: MLStreamError) -> None:
        """The stream failed with ``error`` (on its way to the client); ``finished`` ends it."""

    def relaying(self, decoder: StreamDecoder, channel: CancelledStream) -> StreamDecoder:
        """The stream's decoder, watched: the first chunk's time, the end, the answer."""

    def finished(self) -> None:
        """The stream's reader stopped (its end, a failure, or its channel cancelled)."""


class Telemetry(Protocol):
    def server_request(self, method: str, path: str, headers: Any, client: str, scheme: str,
                       request_id: str = "") -> RequestTrace:
        """The SERVER span of a request, continuing the caller's ``traceparent`` if any."""

    def provider_call(self, request: UpstreamRequest, connector: Connector, *, dialect: str | None,
                      parent: RequestTrace | None, stream: bool) -> CallTrace:
        """The CLIENT span of a call about to be made (started when it opens)."""

    def flush(self, timeout_seconds: float = 5.0) -> bool:
        """Export what is pending now; True if it all went."""

    def shutdown(self) -> None:
        """Export what is pending, then stop the exporters."""
