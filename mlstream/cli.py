"""Command line: ``mlstream serve``, ``mlstream demo``, ``mlstream keys``, ``mlstream --version``."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from . import __version__, config
from .errors import MLStreamError
from .logs import configure_logging
from .settings import ServerSettings

log = logging.getLogger("mlstream")

THREAD_STACK_BYTES = 512 * 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlstream", description=(
        "Stream remote LLM answers (OpenAI, Amazon Bedrock) through the "
        "OpenSearch ML Commons REST API."))
    parser.add_argument("--version", action="version", version=f"mlstream {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the server (flags > MLSTREAM_* env > --config file)")
    config.add_flags(serve)

    demo = commands.add_parser("demo", help=(
        "run a fake OpenAI provider and the server, stream one answer, keep serving"))
    demo.add_argument("--once", action="store_true", help="exit after the streamed answer")
    demo.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    demo.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")

    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(dest="keys_command", metavar="KEYS_COMMAND", required=True)
    create = key_commands.add_parser("create", help="create a key; it is shown once, as the last line")
    create.add_argument("--role", choices=("admin", "user"), required=True)
    create.add_argument("--name", default=None)
    key_commands.add_parser("list", help="list keys (never the keys themselves)")
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    for sub in key_commands.choices.values():
        sub.add_argument("--data-dir", type=Path, default=None,
                         help="the server's data directory (default: $MLSTREAM_DATA_DIR or ~/.mlstream)")
        sub.add_argument("--store", default=None, metavar="URL",
                         help="the server's postgresql:// store (default: $MLSTREAM_STORE, else SQLite "
                              "in the data directory)")
    return parser


def serve(settings: ServerSettings, argv: Sequence[str] = ()) -> int:
    from .server import workers
    from .server.app import Server

    link = workers.WorkerLink.from_environment(settings)
    if link is None and workers.worker_count(settings.workers) > 1:
        return workers.Supervisor(settings, argv).run()
    if link is not None:
        settings = workers.worker_settings(settings)
    server = Server(settings, workers=link)
    public = not _is_loopback(settings.host)
    if public and not settings.insecure_no_auth:
        # Losing the last key while running must lock this server, never open it.
        server.app.authenticator.refuse_without_keys()
    if not server.app.authenticator.keys_exist:
        if public and not settings.insecure_no_auth:
            server.stop(drain_timeout=0)
            raise MLStreamError(
                f"refusing to serve on {settings.host} without API keys: create one with "
                "'mlstream keys create --role admin', or pass --insecure-no-auth")
        log.warning("no API keys exist: every route is open to anyone who can reach %s "
                    "(create one with 'mlstream keys create --role admin'; once a key has "
                    "existed, revoking the last one locks the server instead)", settings.host)
    if link is not None:
        link.serve_metrics(server.app.metrics.render)
    server.start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if link is not None:
        workers.stop_when_orphaned(stop)
    sys.stdout.write(f"mlstream listening on {server.url}\n")
    sys.stdout.flush()
    # Woken at least twice a second: a signal the kernel hands to another thread only
    # trips a flag, and its handler runs when the main thread next runs Python, which
    # an untimed wait would not do until something else woke it.
    while not stop.wait(0.5):
        pass
    log.info("shutting down: draining open streams for up to %.0f s", settings.drain_timeout)
    server.stop()
    return 0


def keys(args: argparse.Namespace) -> int:
    from .auth import KeyStore
    from .stores import open_store

    data_dir = args.data_dir or Path(os.environ.get("MLSTREAM_DATA_DIR", Path.home() / ".mlstream"))
    store = open_store(args.store or os.environ.get("MLSTREAM_STORE", ""), data_dir.expanduser())
    try:
        key_store = KeyStore(store)
        out = sys.stdout
        if args.keys_command == "create":
            key, secret = key_store.create(args.role, args.name)
            out.write(f"created key {key.key_id} ({key.name}, role {key.role}); it is shown only "
                      "once, below:\n")
            out.write(secret + "\n")
        elif args.keys_command == "list":
            out.write(f"{'ID':<10} {'ROLE':<6} NAME\n")
            for key in key_store.list():
                out.write(f"{key.key_id:<10} {key.role:<6} {key.name}\n")
        elif not key_store.revoke(args.key_id):
            raise MLStreamError(f"no key with id {args.key_id}")
        else:
            out.write(f"revoked key {args.key_id}\n")
        return 0
    finally:
        store.close()


def tune_process() -> None:
    """Process-wide settings for a server, made once at start-up (never in a constructor)."""
    # Reader and handler threads mostly wait on sockets, so a small stack lets thousands
    # of concurrent streams fit (the default is 8 MiB of address space each); 512 KiB is
    # ample for our call depth and for json/sqlite.
    threading.stack_size(THREAD_STACK_BYTES)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command in ("serve", "demo"):
        tune_process()
    try:
        if args.command == "serve":
            settings, sources = config.resolve(vars(args), os.environ, args.config)
            if args.print_config:
                sys.stdout.write(config.describe(settings, sources, os.environ))
                return 0
            configure_logging(settings.log_level, settings.log_format)
            return serve(settings, sys.argv[1:] if argv is None else argv)
        configure_logging(getattr(args, "log_level", "WARNING"), "text")
        if args.command == "keys":
            return keys(args)
        from .demo import run_demo
        return run_demo(port=args.port, once=args.once)
    except MLStreamError as exc:
        configure_logging("ERROR", "text")
        log.error("%s", exc.reason)
        return 2
    except OSError as exc:
        configure_logging("ERROR", "text")
        log.error("cannot start: %s", exc)
        return 1


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())
