"""The server: wiring of the parts, the listening socket, and the lifecycle.

    socketserver.TCPServer
     +-- http.server.HTTPServer
          +-- http.server.ThreadingHTTPServer    one daemon thread per connection
               +-- MLStreamServer                 carries the App
    App
     +-- store (SQLiteStore or PostgresStore)  cluster (ClusterSettings)  registry (Registry)
     +-- reaper (ModelReaper: undeploys models idle past their TTL)
     +-- pool (StreamPool)  upstream (UpstreamClient)  predictor (Predictor)  batch (BatchJobs)
     +-- in_flight (InFlight)  metrics (Metrics)  router (Router)
     +-- recorder (UsageRecorder)  controllers (Controllers)  accountant (Accountant: admit, record)
     +-- responses_kept (ResponseKeeper): the Responses front's stored responses, written off its streams
     +-- stop_words (StopWordIndices): what guardrails percolate
     +-- telemetry (None, or OtelTelemetry: spans and GenAI metrics over OTLP, docs/tracing.md)

Shutdown (``Server.stop``): stop accepting and close the listening socket, let
requests in flight (streams included) finish until the drain deadline, cancel the
streams still open (each gets a final error event), then close the pool, the
upstream pools and the store.
"""

from __future__ import annotations

import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from typing import Any
from http.server import ThreadingHTTPServer

from ..store.cluster import ClusterSettings, cluster_uuid
from ..access.tenants import TenantStore
from ..access.keys import Authenticator, Caller, KeyStore
from ..inference.batch import BatchJobs
from ..access.budgets import Accountant
from ..access.controllers import Controllers
from ..access.credentials import CredentialCodec, open_codec
from ..errors import BadRequest, MLStreamError, ShuttingDown
from .. import processing
from ..fronts.openai.wire import embedding_vectors
from ..metrics import Metrics
from ..guard.guardrails import Checks
from ..models.ttl import ModelReaper
from ..inference.predict import Ask, Bound, CallMeter, Predictor
from ..models.registry import Registry
from ..settings.server import AUTO_DEPLOY, SYNC_UP_INTERVAL, ServerSettings
from ..speedups import start_thread_nowait
from ..guard.stopwords import StopWordIndices
from ..store.sqlite import Store
from ..usage.limits import RateLimiter
from ..store.open import is_postgres, open_store
from .. import telemetry
from ..telemetry.hooks import RequestTrace
from ..streaming.channel import Channel
from ..streaming.pool import StreamPool
from ..streaming.watcher import Watcher, available as watching_available
from ..upstream.client import UpstreamClient
from ..upstream import mcp_client
from ..fronts.console import add_console_routes
from ..fronts.mlcommons.node import NodeIdentity
from ..fronts.mlcommons.indices import add_index_routes
from ..fronts.mlcommons.routes import build_router
from ..fronts.anthropic.routes import add_anthropic_routes
from ..fronts.mlcommons.usage_routes import add_usage_routes
from ..fronts.mlcommons.memory_routes import add_memory_routes
from ..fronts.mlcommons.agent_routes import add_agent_routes
from ..fronts.mlcommons.mcp_routes import add_mcp_routes
from ..agents.mcp_server import McpServer
from ..agents.agents import Agents
from ..agents.mcp_connectors import McpConnectors
from ..memory.conversations import Conversations
from ..inference.cache import ResponseCache
from ..fronts.openai.routes import add_openai_routes
from ..fronts.responses.keeper import ResponseKeeper
from ..fronts.responses.routes import add_responses_routes
from ..usage.recorder import UsageRecorder
from ..server.deadlines import Deadlines
from ..server.hangups import HangupWatcher
from ..server.transport import HTTPRequestHandler
from .workers import WorkerLink

log = logging.getLogger(__name__)
# An MCP connector's tools, as ml-commons names their type.
MCP_TOOL_TYPE = "McpStreamableHttpTool"
# The usage records' route of a semantic cache's embedding calls.
EMBEDDING_ROUTE = "response-cache/embedding"

# After cancelling the streams still open at the drain deadline, how long their
# handlers get to write the final error event.
CANCEL_GRACE_SECONDS = 2.0


class InFlight:
    """Requests being handled and the channels of streams being relayed, so shutdown
    can wait for them (and cancel the streams still open at its deadline)."""

    def __init__(self) -> None:
        # Guards the request count and the channel set: arithmetic and set updates
        # only; cancel_streams cancels (shuts sockets down) after releasing it.
        self._cond = threading.Condition()
        self._requests = 0
        self._channels: set[Channel] = set()

    def begin_request(self) -> None:
        with self._cond:
            self._requests += 1

    def end_request(self) -> None:
        with self._cond:
            self._requests -= 1
            if not self._requests:
                self._cond.notify_all()

    def add(self, channel: Channel) -> None:
        with self._cond:
            self._channels.add(channel)

    def discard(self, channel: Channel) -> None:
        with self._cond:
            self._channels.discard(channel)

    @property
    def streams(self) -> int:
        with self._cond:
            return len(self._channels)

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._requests, timeout)

    def cancel_streams(self, error: MLStreamError) -> int:
        with self._cond:
            channels = list(self._channels)
        for channel in channels:  # outside the lock: cancel shuts sockets down
            channel.cancel(error)
        return len(channels)


class App:
    def __init__(self, settings: ServerSettings, *, store: Store | None = None,
                 codec: CredentialCodec | None = None, workers: WorkerLink | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.workers = workers  # this process's siblings under ``serve --workers N``
        # Spans and GenAI metrics over OTLP when an endpoint is set (each process its own
        # exporters); None: off, and free. First: a missing SDK stops the start before anything opens.
        self.telemetry = telemetry.start(settings)
        self.store = store or open_store(settings.store, settings.data_dir)
        try:
            codec = codec or open_codec(self.store, settings.data_dir)
            self.cluster_uuid = cluster_uuid(self.store)
        except BaseException:
            self.store.close()
            raise
        self.cluster = ClusterSettings(self.store, settings)
        self.authenticator = Authenticator(self.store)
        # clock: wall time in ms for model TTLs (None: the real one; a test moves its own).
        self.registry = Registry(self.store, codec, lambda: self.cluster.endpoint_policy,
                                 lambda: bool(self.cluster.value(AUTO_DEPLOY)), **({"clock": clock} if clock else {}))
        self.reaper = ModelReaper(self.registry, lambda: int(self.cluster.value(SYNC_UP_INTERVAL))).start()
        self.cluster.on_update(SYNC_UP_INTERVAL, self.reaper.reschedule)
        self.pool = StreamPool(settings.stream_workers, settings.stream_backlog)
        self.watcher = Watcher() if watching_available() else None
        self.upstream = UpstreamClient()
        self.metrics = Metrics(self.pool)
        # Several processes (workers, or instances on one database) share their buckets in
        # the store; a lone process keeps them in memory, at no cost per request.
        shared = workers is not None or is_postgres(settings.store)
        self.stop_words = StopWordIndices(self.store)
        # Usage, budgets and controllers: the predictor admits each provider call
        # (accountant.admit), the transport records it as its request ends (accountant.record).
        self.usage_tables = self.store.usage()
        self.recorder = UsageRecorder(self.usage_tables, self.metrics)
        self.controllers = Controllers(self.store, RateLimiter(self.store if shared else None))
        self.accountant = Accountant(self.usage_tables, self.recorder, self.metrics, self.controllers)
        # The response cache: its table opened on first use (a deployment that never turns it on
        # never makes cache.db).
        self.cache = ResponseCache(self.store.cache, settings, self.metrics, embed=self.embed_for_cache)
        self.predictor = Predictor(self.cluster, self.upstream, self.pool, self.metrics, settings,
                                   RateLimiter(self.store if shared else None), self.accountant,
                                   Checks(self.stop_words.percolate, self.ask_guardrail_model),
                                   resolve=self.registry.resolve, telemetry=self.telemetry, watcher=self.watcher,
                                   cache=self.cache)
        # Batch predict jobs at the providers, and the thread that polls them.
        self.batch = BatchJobs(self.registry, self.predictor, self.cluster)
        self.in_flight = InFlight()
        # Where the listening socket is bound; the server sets it once bound (port 0 picks one).
        self.bound_address: tuple[str, int] = (settings.host, settings.port)
        self.router = build_router(self.registry, self.predictor, self.cluster, self.metrics,
                                   self.readiness_problems, self.node_identity, self.render_metrics,
                                   batch=self.batch)
        add_openai_routes(self.router, self.registry, self.predictor)
        add_usage_routes(self.router, KeyStore(self.store), self.usage_tables, self.recorder, self.accountant,
                         self.controllers, TenantStore(self.store), self.cache)
        # Conversation memory: its tables opened on first use (memory.db, or PostgreSQL's).
        self.memories = Conversations(self.store.memory)
        add_memory_routes(self.router, self.memories)
        mcp_connectors = McpConnectors(self.registry.connector, self.upstream,
                                       lambda: self.cluster.endpoint_policy.allow_private)
        self.agents = Agents(self.store, self.predictor, self.registry.resolve, self.memories, mcp_connectors)
        add_agent_routes(self.router, self.agents)
        self.mcp = McpServer(self.store, self.agents, self.may_use_model)
        add_mcp_routes(self.router, self.mcp, self.connector_tools)
        add_anthropic_routes(self.router, self.registry, self.predictor)
        self.responses_kept = ResponseKeeper(self.store, shared=shared)  # the Responses front's, off its streams
        add_responses_routes(self.router, self.registry, self.predictor, self.responses_kept,
                             settings.responses_ttl_days)
        add_console_routes(self.router)
        add_index_routes(self.router, self.stop_words)  # last: /{index} takes what no other route does
        # Set when shutdown begins: keep-alive connections are closed after their
        # current request instead of waiting for another.
        self.draining = threading.Event()
        self.batch.start()  # batch jobs still running when the server last stopped are polled again

    def embed_for_cache(self, model_id: str, text: str, caller: Caller | None,
                        trace: RequestTrace | None = None) -> list[float]:
        """A semantic cache's embedding of a request's conversation: one call of the
        embedding model as the caller (its access, tpm and budget; not its rpm: the request it
        is made for took its place), recorded in its usage under the route
        ``response-cache/embedding``; its provider call a span under the request's."""
        def bind(target: object) -> Bound:
            def run(prepared: object) -> list[list[float]]:
                return embedding_vectors(self.predictor.predict(prepared).body)  # type: ignore[arg-type]
            return Bound(Ask({}, processing.TextDocs((text,))), run=run)

        vectors = self.predictor.call_recorded(self.registry.resolve(model_id, caller), bind, caller,
                                               route=EMBEDDING_ROUTE, trace=trace)
        if len(vectors) != 1:
            raise BadRequest(f"model [{model_id}] answered {len(vectors)} embeddings for one text: "
                             "is it an embedding model?")
        return vectors[0]

    def connector_tools(self, connector_id: str) -> dict[str, Any]:
        """``GET /_plugins/_ml/connectors/<id>/tools``: the tools an MCP connector's server lists."""
        connector = self.registry.connector(connector_id)
        if not connector.is_mcp:
            raise BadRequest(f"connector [{connector_id}] is a {connector.protocol} connector, not an MCP one")
        tools = mcp_client.list_tools(self.upstream, connector, self.cluster.endpoint_policy.allow_private)
        return {"tools": [{"name": tool["name"], "type": MCP_TOOL_TYPE,
                           **({"description": tool["description"]} if isinstance(tool.get("description"), str) else {}),
                           **({"input_schema": tool["inputSchema"]} if isinstance(tool.get("inputSchema"), dict) else {})}
                          for tool in tools]}

    def may_use_model(self, model_id: str, caller: Caller | None) -> bool:
        """Whether ``caller`` may call a model, nothing deployed (what every listing shows)."""
        record = self.store.get("model", model_id)
        return record is not None and bool(self.registry.usable_models(caller, [(record.id, record.doc)]))

    def ask_guardrail_model(self, model_id: str, parameters: dict) -> object:
        """A model guardrail's question to its model (ml-commons: an MLPredictionTaskRequest
        with these parameters): the answer's ``dataAsMap["response"]``. Its own meter: the
        guardrail model's call is not admitted against, nor recorded for, the caller's key."""
        result = self.predictor.tensors(self.registry.resolve(model_id), Ask(parameters), CallMeter())
        output = result.body["inference_results"][0]["output"][0]
        return output.get("dataAsMap", {}).get("response")

    def node_identity(self) -> NodeIdentity:
        return NodeIdentity(self.cluster_uuid, self.bound_address[0], self.bound_address[1],
                            self.settings.max_body_bytes)

    def render_metrics(self) -> str:
        """This process's metrics, or under ``--workers`` the sum over every worker."""
        own = self.metrics.render()
        return own if self.workers is None else self.workers.render_all(own)

    def readiness_problems(self) -> list[str]:
        """Why the server should not get new traffic now (empty when ready)."""
        problems = [] if self.workers is None else self.workers.problems()
        try:
            self.store.change_counter()
        except Exception:  # noqa: BLE001 - any store failure means not ready
            problems.append("the store cannot be read")
        if self.pool.queued > self.pool.backlog:
            problems.append("the stream readers are a backlog behind")
        if self.draining.is_set():
            problems.append("shutting down")
        return problems

    def drain(self, timeout: float) -> None:
        """Let open streams finish for ``timeout`` seconds, then cancel the rest."""
        self.draining.set()
        if not self.in_flight.wait_idle(timeout):
            count = self.in_flight.cancel_streams(
                ShuttingDown("the server is shutting down"))
            log.warning("cancelled %d streams still open at the drain deadline", count)
            self.in_flight.wait_idle(CANCEL_GRACE_SECONDS)

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        self.reaper.stop()
        self.batch.close()
        self.agents.close()  # before the predictor: a run still going ends as a failed task
        self.predictor.close()
        self.pool.shutdown()
        if self.watcher is not None:
            self.watcher.close()
        self.upstream.close()
        self.recorder.close()  # after the drain: every call answered is in the queue
        self.responses_kept.close()  # likewise every response kept
        self.store.close()
        if self.telemetry is not None:  # last: what the drain's streams ended with goes too
            self.telemetry.shutdown()


class MLStreamServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: bursts of new streams are not refused by TCP

    def __init__(self, app: App) -> None:
        self.app = app
        self.deadlines = Deadlines()
        self.hangups = HangupWatcher()
        # What each connection's handler uses (transport.Host): this server's parts.
        self.host = self
        self.settings, self.router, self.authenticator = app.settings, app.router, app.authenticator
        self.metrics, self.in_flight, self.draining = app.metrics, app.in_flight, app.draining
        self.store, self.accountant, self.telemetry = app.store, app.accountant, app.telemetry
        settings = app.settings
        self.address_family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        # Workers each listen on the port their supervisor holds; the kernel spreads connections.
        self.allow_reuse_port = app.workers is not None
        try:
            super().__init__((settings.host, settings.port), HTTPRequestHandler)
            app.bound_address = self.server_address[:2]
            self.tls = settings.tls_cert is not None
            if self.tls:
                self.socket = tls_context(settings).wrap_socket(
                    # The handshake runs in the connection's own thread, on its first
                    # read, so a slow or bogus client never blocks the accept loop.
                    self.socket, server_side=True, do_handshake_on_connect=False)
        except BaseException:
            self.deadlines.close()
            self.hangups.close()
            if getattr(self, "socket", None) is not None:
                self.socket.close()
            raise

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        # Daemon by nature and never joined, as daemon_threads asks (see speedups).
        start_thread_nowait(self.process_request_thread, (request, client_address))

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.close()
        self.hangups.close()

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        error = sys.exc_info()[1]
        if isinstance(error, (ssl.SSLError, ConnectionError, TimeoutError)):
            # A failed TLS handshake or a peer that vanished is the client's business.
            log.debug("connection from %s ended: %s", client_address[0], error)
            return
        log.exception("unhandled error on the connection from %s", client_address[0])


def tls_context(settings: ServerSettings) -> ssl.SSLContext:
    """Modern server defaults: TLS 1.2 or newer, the stdlib's vetted cipher choice."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise MLStreamError(f"cannot load the TLS certificate and key: {exc}") from None
    return context


class Server:
    """A running mlstream: serve in a background thread, stop gracefully."""

    def __init__(self, settings: ServerSettings, **app_options) -> None:
        self.app = App(settings, **app_options)
        try:
            self.http = MLStreamServer(self.app)
        except BaseException:
            self.app.close()
            raise
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> "Server":
        # The accept loop checks for shutdown between polls; a short poll keeps stop() prompt.
        self._thread = threading.Thread(target=self.http.serve_forever, args=(0.05,),
                                        name="mlstream-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting at once, drain open streams, release everything. Safe twice."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self.http.shutdown()   # the accept loop ends ...
        self.http.server_close()   # ... and new connections are refused
        self.app.drain(self.app.settings.drain_timeout if drain_timeout is None else drain_timeout)
        self.app.close()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop(drain_timeout=0)
