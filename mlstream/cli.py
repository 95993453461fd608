"""Command line: ``mlstream serve``, ``mlstream demo``, ``mlstream --version``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from . import __version__
from .errors import MLStreamError
from .settings import ServerSettings, default_stream_workers

log = logging.getLogger("mlstream")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlstream", description=(
        "Stream remote LLM answers (OpenAI, Amazon Bedrock) through the "
        "OpenSearch ML Commons REST API."))
    parser.add_argument("--version", action="version", version=f"mlstream {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the server")
    add_serve_options(serve)

    demo = commands.add_parser("demo", help=(
        "run a fake OpenAI provider and the server, stream one answer, keep serving"))
    demo.add_argument("--once", action="store_true", help="exit after the streamed answer")
    demo.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    demo.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    return parser


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    defaults = ServerSettings()
    parser.add_argument("--host", default=defaults.host, help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=defaults.port, help="port; 0 picks a free one (default 9200)")
    parser.add_argument("--data-dir", type=Path, default=defaults.data_dir,
                        help="where the SQLite store lives (default ~/.mlstream)")
    parser.add_argument("--stream-workers", type=int, default=default_stream_workers(),
                        help="provider readers running at once (default processors x 4)")
    parser.add_argument("--stream-backlog", type=int, default=defaults.stream_backlog,
                        help="streams waiting for a reader before 429 (default 10000)")
    parser.add_argument("--stream-queue-chunks", type=int, default=defaults.stream_queue_chunks,
                        help="chunks buffered per stream for a slow client (default 64)")
    parser.add_argument("--trusted-endpoint", action="append", default=[], metavar="REGEX",
                        help="also trust connector URLs matching REGEX (repeatable)")
    parser.add_argument("--allow-private-endpoints", action="store_true",
                        help="allow connectors to call loopback/private addresses")
    parser.add_argument("--client-stall-timeout", type=float, default=defaults.client_stall_timeout,
                        help="seconds one write to a client may block before it is cut (default 60)")
    parser.add_argument("--heartbeat-interval", type=float, default=defaults.heartbeat_interval,
                        help="seconds of silence before an SSE ': ping' comment (default 15)")
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout,
                        help="seconds SIGTERM lets open streams finish (default 30)")
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes,
                        help="largest request body accepted (default 10 MiB)")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def settings_from(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        host=args.host, port=args.port, data_dir=args.data_dir.expanduser(),
        stream_workers=args.stream_workers, stream_backlog=args.stream_backlog,
        stream_queue_chunks=args.stream_queue_chunks, trusted_endpoints=tuple(args.trusted_endpoint),
        allow_private_endpoints=args.allow_private_endpoints,
        client_stall_timeout=args.client_stall_timeout, heartbeat_interval=args.heartbeat_interval,
        drain_timeout=args.drain_timeout, max_body_bytes=args.max_body_bytes)


def serve(settings: ServerSettings) -> int:
    from .server.app import Server

    server = Server(settings).start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sys.stdout.write(f"mlstream listening on {server.url}\n")
    sys.stdout.flush()
    stop.wait()
    log.info("shutting down: draining open streams for up to %.0f s", settings.drain_timeout)
    server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return serve(settings_from(args))
        from .demo import run_demo
        return run_demo(port=args.port, once=args.once)
    except MLStreamError as exc:
        log.error("%s", exc.reason)
        return 2
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
