"""Traces and metrics in OpenTelemetry's GenAI conventions, exported over OTLP/HTTP: optional.

    start(settings)              None when off: nothing of OpenTelemetry is imported, and every
                                 hook is an attribute that is None, checked with one ``if``;
                                 else ``otel.OtelTelemetry`` (the SDK, imported only then)
    hooks.Telemetry              server_request: the SERVER span of one HTTP request (the
                                 transport's ``_handle``); provider_call: the CLIENT span and GenAI
                                 metrics of one provider call (the predictor makes one per
                                 ``ProviderCall``, which reports to it)
    genai                        what a call is in the GenAI conventions' terms (pure)

    HTTP request ───── RequestTrace (SERVER span; on the request's CallMeter as ``trace``)
      └─ provider call ── CallTrace (CLIENT span, child of the request's; its traceparent is
                          sent to the provider, injected into every attempt before signing)

What each span holds, and how to run with a collector: docs/tracing.md. Only ``otel``
imports OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Mapping

from ..errors import MLStreamError
from .hooks import CallTrace, CancelledStream, RequestTrace, Telemetry

if TYPE_CHECKING:
    from ..settings.server import ServerSettings

log = logging.getLogger(__name__)

# The standard variable that turns export on without --otel-endpoint (the SDK reads it,
# and the other OTEL_* variables, itself).
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
DISABLED_ENV = "OTEL_SDK_DISABLED"


def start(settings: ServerSettings, environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """The server's telemetry: None unless ``--otel-endpoint`` or OTEL_EXPORTER_OTLP_ENDPOINT
    names a collector (and OTEL_SDK_DISABLED is not true). Every process sets up its own
    exporters (under ``--workers`` each worker is a process of its own that starts here)."""
    environ = os.environ if environ is None else environ
    endpoint = settings.otel_endpoint or None
    if endpoint is None and not environ.get(ENDPOINT_ENV):
        return None
    if environ.get(DISABLED_ENV, "").strip().lower() == "true":
        log.info("%s is true: no traces or metrics are exported", DISABLED_ENV)
        return None
    try:
        from .otel import OtelTelemetry
    except ImportError as exc:
        message = (f"exporting traces needs OpenTelemetry, which is not installed: pip install "
                   f"'mlstream[otel]' ({exc.name or exc})")
        if endpoint is not None:
            raise MLStreamError(f"--otel-endpoint: {message}") from None
        log.warning("%s is set but %s; serving without telemetry", ENDPOINT_ENV, message)
        return None
    return OtelTelemetry(endpoint, capture_content=settings.otel_capture_content)


__all__ = ["CallTrace", "CancelledStream", "RequestTrace", "Telemetry", "start"]
