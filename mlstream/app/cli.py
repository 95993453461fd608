"""Command line: ``mlstream serve``, ``mlstream demo``, ``mlstream keys``, ``mlstream usage``,
``mlstream --version``."""

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

from .. import __version__
from . import config
from ..errors import MLStreamError
from ..logs import configure_logging
from ..settings.server import ServerSettings

log = logging.getLogger("mlstream")
# access.keys.ROLES, spelled out: parsing the command line imports none of the server's modules.
ROLES = ("admin", "tenant_admin", "user")

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
    create.add_argument("--role", choices=ROLES, required=True)
    create.add_argument("--name", default=None)
    _add_access_flags(create)
    _add_limit_flags(create)
    update = key_commands.add_parser("update", help="change a key's role, tenant, access or limits (only the "
                                                    "flags given)")
    update.add_argument("name", help="the key's name (or id)")
    update.add_argument("--role", choices=ROLES, default=None)
    _add_access_flags(update)
    _add_limit_flags(update, removable=True)
    listing = key_commands.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant", default=None, help="only this tenant's keys")
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")

    tenants = commands.add_parser("tenants", help="manage tenants (the teams keys belong to)")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", metavar="TENANTS_COMMAND", required=True)
    for name, text in (("create", "create a tenant"), ("update", "change a tenant (only the flags given)")):
        sub = tenant_commands.add_parser(name, help=text)
        sub.add_argument("name")
        sub.add_argument("--models", default=None, help="comma list of the model ids or names its keys may call "
                                                        "(default: every model; '' for none)")
        if name == "update":
            sub.add_argument("--all-models", action="store_true", help="allow every model again")
        _add_limit_flags(sub, removable=name == "update")
    tenant_commands.add_parser("list", help="list tenants")
    tenant_delete = tenant_commands.add_parser("delete", help="delete a tenant and revoke its keys")
    tenant_delete.add_argument("name")
    usage = commands.add_parser("usage", help="print usage and spend from the records, as a table")
    usage.add_argument("--group-by", default="key,model",
                       help="a comma list of key, model, interface, outcome, day, hour (default key,model)")
    usage.add_argument("--from", dest="from_", default=None, help="ISO-8601 or epoch ms (default: 24 h ago)")
    usage.add_argument("--to", default=None, help="ISO-8601 or epoch ms (default: now)")
    usage.add_argument("--key", default=None, help="one key's name")
    usage.add_argument("--model", default=None, help="one model id")
    for sub in (*key_commands.choices.values(), *tenant_commands.choices.values(), usage):
        sub.add_argument("--data-dir", type=Path, default=None,
                         help="the server's data directory (default: $MLSTREAM_DATA_DIR or ~/.mlstream)")
        sub.add_argument("--store", default=None, metavar="URL",
                         help="the server's postgresql:// store (default: $MLSTREAM_STORE, else SQLite "
                              "in the data directory)")
    return parser


def _add_limit_flags(parser: argparse.ArgumentParser, removable: bool = False) -> None:
    """The key limit flags; for ``update``, ``--no-<limit>`` removes one."""
    parser.add_argument("--budget", type=float, default=None, help="spend allowed per budget period")
    parser.add_argument("--budget-period", choices=("day", "week", "month"), default=None,
                        help="UTC day, ISO week or calendar month (default month)")
    parser.add_argument("--tpm", type=int, default=None, help="tokens per sliding 60 s")
    parser.add_argument("--rpm", type=int, default=None, help="requests per sliding 60 s")
    if removable:
        for name in ("budget", "tpm", "rpm"):
            parser.add_argument(f"--no-{name}", action="store_true", help=f"remove the key's {name}")


def _add_access_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", default=None, help="the key's tenant (default: default)")
    parser.add_argument("--backend-roles", default=None, help="comma list of ml-commons backend roles")
    parser.add_argument("--models", default=None, help="comma list narrowing the tenant's models for this key")


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _access_changes(args: argparse.Namespace) -> dict:
    changes: dict = {}
    if args.tenant is not None:
        changes["tenant"] = args.tenant
    if args.backend_roles is not None:
        changes["backend_roles"] = _csv(args.backend_roles)
    if args.models is not None:
        changes["models"] = _csv(args.models)
    return changes


def _limit_changes(args: argparse.Namespace) -> dict:
    """The limit fields the flags name, as the key routes take them (None removes one)."""
    changes: dict = {}
    for name in ("budget", "budget_period", "tpm", "rpm"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
        if getattr(args, f"no_{name}", False):
            changes[name] = None
    return changes


def serve(settings: ServerSettings, argv: Sequence[str] = ()) -> int:
    from . import workers
    from .compose import Server

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
    from ..access.keys import KeyStore

    store = _open_store(args)
    try:
        key_store = KeyStore(store)
        out = sys.stdout
        if args.keys_command == "create":
            body = {"role": args.role, **({"name": args.name} if args.name else {}), **_access_changes(args),
                    **_limit_changes(args)}
            key, secret = key_store.create_from_body(body)
            out.write(f"created key {key.key_id} ({key.name}, role {key.role}, tenant {key.tenant}"
                      f"{_limits_text(key.limits)}); it is shown only once, below:\n")
            out.write(secret + "\n")
        elif args.keys_command == "update":
            changes = _limit_changes(args) | _access_changes(args) | ({"role": args.role} if args.role else {})
            key = key_store.update(args.name, changes)
            out.write(f"updated key {key.key_id} ({key.name}, role {key.role}, tenant {key.tenant}"
                      f"{_limits_text(key.limits)})\n")
        elif args.keys_command == "list":
            out.write(f"{'ID':<10} {'ROLE':<12} {'NAME':<20} {'TENANT':<16} LIMITS\n")
            for key in key_store.list(args.tenant):
                out.write(f"{key.key_id:<10} {key.role:<12} {key.name:<20} {key.tenant:<16} "
                          f"{_limits_text(key.limits).lstrip(', ')}".rstrip() + "\n")
        elif not key_store.revoke(args.key_id):
            raise MLStreamError(f"no key with id {args.key_id}")
        else:
            out.write(f"revoked key {args.key_id}\n")
        return 0
    finally:
        store.close()


def tenants(args: argparse.Namespace) -> int:
    """``mlstream tenants``: the tenant routes' changes, made in the store directly."""
    from ..access.tenants import TenantStore

    store = _open_store(args)
    try:
        tenant_store, out = TenantStore(store), sys.stdout
        command = args.tenants_command
        if command in ("create", "update"):
            body = _limit_changes(args)
            if args.models is not None:
                body["models"] = _csv(args.models)
            if getattr(args, "all_models", False):
                body["models"] = None
            tenant = (tenant_store.create({"name": args.name, **body}) if command == "create"
                      else tenant_store.update(args.name, body))
            out.write(f"{command}d tenant {tenant.name} (models {_models_text(tenant.models)}"
                      f"{_limits_text(tenant.limits)})\n")
        elif command == "list":
            out.write(f"{'NAME':<16} {'MODELS':<30} LIMITS\n")
            for tenant in tenant_store.list():
                out.write(f"{tenant.name:<16} {_models_text(tenant.models):<30} "
                          f"{_limits_text(tenant.limits).lstrip(', ')}".rstrip() + "\n")
        else:
            tenant, revoked = tenant_store.delete(args.name)
            out.write(f"deleted tenant {tenant.name} and revoked its {revoked} keys\n")
        return 0
    finally:
        store.close()


def _models_text(models: tuple[str, ...] | None) -> str:
    return "all" if models is None else (",".join(models) or "none")


def _open_store(args: argparse.Namespace):
    from ..store.open import open_store

    data_dir = args.data_dir or Path(os.environ.get("MLSTREAM_DATA_DIR", Path.home() / ".mlstream"))
    return open_store(args.store or os.environ.get("MLSTREAM_STORE", ""), data_dir.expanduser())


def _limits_text(limits) -> str:
    parts = []
    if limits.budget is not None:
        parts.append(f"budget {limits.budget:g}/{limits.budget_period}")
    if limits.tpm is not None:
        parts.append(f"tpm {limits.tpm}")
    if limits.rpm is not None:
        parts.append(f"rpm {limits.rpm}")
    return "".join(f", {part}" for part in parts)


def usage(args: argparse.Namespace) -> int:
    """``mlstream usage``: what ``GET /_plugins/_mlstream/usage`` answers, as a table."""
    import time

    from ..usage.records import group_value, parse_usage_query, usage_body

    params = {name: value for name, value in (("from", args.from_), ("to", args.to), ("key", args.key),
                                              ("model", args.model), ("group_by", args.group_by)) if value}
    query = parse_usage_query(params, int(time.time() * 1000))
    store = _open_store(args)
    try:
        rows, totals = store.usage().summarize(query)
    finally:
        store.close()
    body = usage_body(query, [({f: group_value(f, v) for f, v in groups.items()}, sums) for groups, sums in rows],
                      totals)
    sys.stdout.write(usage_table(body))
    return 0


def usage_table(body: dict) -> str:
    """A usage answer as aligned text columns, a totals line last."""
    columns = [*body["group_by"], "requests", "errors", "input_tokens", "output_tokens", "cached_input_tokens",
               "cost"]
    lines = [[str(c).upper() for c in columns]]
    for row in (*body["rows"], {**{c: "TOTAL" if i == 0 else "" for i, c in enumerate(body["group_by"])},
                                **body["totals"]}):
        lines.append(["-" if row.get(c) is None else (f"{row[c]:.6g}" if isinstance(row[c], float) else str(row[c]))
                      for c in columns])
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    text = f"usage from {body['from']} to {body['to']}\n"
    return text + "".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() + "\n"
                          for line in lines)


def tune_process() -> None:
    """Process-wide settings for a server, made once at start-up (never in a constructor)."""
    # Reader and handler threads mostly wait on sockets, so a small stack lets thousands
    # of concurrent streams fit (the default is 8 MiB of address space each); 512 KiB is
    # ample for our call depth and for json/sqlite.
    threading.stack_size(THREAD_STACK_BYTES)
    # Every live stream holds two sockets (its client's and its provider's): the soft
    # open-file limit (often 1024) would cap a server at a few hundred streams long
    # before its memory or CPU does. The hard limit is what the operator allows.
    raise_open_file_limit()


def raise_open_file_limit() -> int:
    """The soft open-file limit raised to the hard one (where the platform has them);
    the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            log.warning("could not raise the open-file limit from %d to %d", soft, hard)
    return soft


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
        if args.command == "tenants":
            return tenants(args)
        if args.command == "usage":
            return usage(args)
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
