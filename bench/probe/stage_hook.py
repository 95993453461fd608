"""Thread CPU per named function of an mlstream server, for ``bench/probe/cpu_profile.py --stages``.

Imported by ``sitecustomize`` beside it when ``MLSTREAM_STAGES`` names a directory.
Each function in ``STAGES`` is wrapped: every call adds its calling thread's CPU time
(``time.thread_time_ns``, callees included) and one to a count. Cheap enough (two
clock reads a call) to leave the costs as they are; SIGUSR1 and SIGUSR2 write
snapshots (``start.json``, ``end.json``) for the driver to subtract. Nested stages
overlap: each figure is inclusive.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

# (module, attribute path): the request's way through the server, and what runs beside it.
STAGES = [
    ("http.server", "BaseHTTPRequestHandler.handle_one_request"),
    ("mlstream.server.transport", "HTTPRequestHandler.parse_request"),
    ("mlstream.wire.framing", "HeadLines.take"),
    ("mlstream.wire.framing", "HeadLines.message"),
    ("mlstream.wire.framing", "parse_request_line"),
    ("mlstream.server.deadlines", "Deadlines.disarm"),
    ("mlstream.server.transport", "HTTPRequestHandler._dispatch"),
    ("mlstream.server.transport", "HTTPRequestHandler.send_response"),
    ("mlstream.server.sse_writer", "SSEWriter.__init__"),
    ("mlstream.streaming.channel", "Channel.get"),
    ("mlstream.fronts.mlcommons.routes", "processing.parse_predict_input"),
    ("mlstream.models.connectors", "render_request"),
    ("mlstream.providers.openai", "OpenAIDialect.stream_request"),
    ("mlstream.providers.openai", "OpenAIStreamDecoder.feed"),
    ("mlstream.server.transport", "HTTPRequestHandler._handle"),
    ("mlstream.server.transport", "HTTPRequestHandler._read_body"),
    ("mlstream.server.transport", "HTTPRequestHandler._stream"),
    ("mlstream.server.transport", "HTTPRequestHandler._write_reply"),
    ("mlstream.server.transport", "HTTPRequestHandler._record_call"),
    ("mlstream.server.routing", "Router.match"),
    ("mlstream.access.keys", "Authenticator.authenticate"),
    ("mlstream.models.registry", "Registry.resolve"),
    ("mlstream.store.sqlite", "SQLiteStore._read_counter"),
    ("mlstream.processing", "parse_predict_input"),
    ("mlstream.inference.predict", "Predictor.prepare"),
    ("mlstream.inference.predict", "Predictor._render"),
    ("mlstream.inference.predict", "Predictor.open_stream"),
    ("mlstream.inference.predict", "Predictor.stream_call"),
    ("mlstream.inference.predict", "Predictor._exchange"),
    ("mlstream.inference.predict", "_output"),
    ("mlstream.inference.predict", "CallMeter.usage"),
    ("mlstream.access.budgets", "Accountant.admit"),
    ("mlstream.access.budgets", "Accountant.record"),
    ("mlstream.usage.limits", "RateLimiter.acquire"),
    ("mlstream.inference.predict", "start_stream"),
    ("mlstream.streaming.reader", "open_response"),
    ("mlstream.streaming.reader", "BodyRelay.run"),
    ("mlstream.streaming.reader", "read_stream"),
    ("mlstream.upstream.client", "ProviderCall.open"),
    ("mlstream.upstream.client", "_exchange_on"),
    ("mlstream.upstream.client", "ProviderResponse.begin"),
    ("mlstream.upstream.client", "ProviderCall.finish"),
    ("mlstream.upstream.client", "UpstreamClient.read_body"),
    ("urllib3.response", "HTTPResponse.__init__"),
    ("urllib3.connectionpool", "HTTPConnectionPool._get_conn"),
    ("urllib3.connectionpool", "HTTPConnectionPool._put_conn"),
    ("mlstream.speedups", "body_ready"),
    ("mlstream.server.sse_writer", "first_item"),
    ("mlstream.server.sse_writer", "SSEWriter.run"),
    ("mlstream.server.sse_writer", "stream_head"),
    ("mlstream.streaming.channel", "Channel.__init__"),
    ("mlstream.streaming.pool", "StreamPool._start"),
    ("mlstream.server.hangups", "HangupWatcher.watch"),
    ("mlstream.server.hangups", "HangupWatcher.unwatch"),
    ("mlstream.server.deadlines", "Deadlines.arm"),
    ("mlstream.metrics", "Metrics.http_request"),
    ("mlstream.metrics", "Metrics.stream_finished"),
    ("mlstream.logs", "AccessRecord.emit"),
    ("mlstream.usage.recorder", "UsageRecorder._run"),
    ("mlstream.usage.tables", "UsageTables.write"),
]

_figures: dict[str, list[int]] = {}  # name -> [calls, thread CPU ns]


def _wrap(name: str, function: Any) -> Any:
    figures = _figures.setdefault(name, [0, 0])
    clock = time.thread_time_ns

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = clock()
        try:
            return function(*args, **kwargs)
        finally:
            figures[0] += 1  # under the GIL; a lost update now and then does not matter here
            figures[1] += clock() - began

    return timed


def install() -> None:
    for module_name, path in STAGES:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        function = getattr(owner, attribute, None) if owner is not None else None
        if function is None:
            continue
        raw = owner.__dict__.get(attribute, function) if isinstance(owner, type) else function
        wrapped = _wrap(f"{module_name.removeprefix('mlstream.')}.{path}",
                        raw.__func__ if isinstance(raw, staticmethod) else function)
        setattr(owner, attribute, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
    signal.signal(signal.SIGUSR1, lambda *_: _snapshot("start"))
    signal.signal(signal.SIGUSR2, lambda *_: _snapshot("end"))


def _snapshot(name: str) -> None:
    out = Path(os.environ["MLSTREAM_STAGES"])
    (out / f"{name}.tmp").write_text(json.dumps(_figures))
    (out / f"{name}.tmp").rename(out / f"{name}.json")
