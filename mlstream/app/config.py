"""Where ``serve`` settings come from: flags > ``MLSTREAM_*`` environment > TOML file > defaults.

Every ``ServerSettings`` field is available in all three places under one name:
``--stream-workers`` / ``MLSTREAM_STREAM_WORKERS`` / ``stream_workers``. The list
``trusted_endpoints`` is the repeatable flag ``--trusted-endpoint``, a TOML array,
or in the environment a JSON array (or a single regex).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Mapping

from ..errors import BadRequest
from ..settings.server import MASTER_KEY_ENV, MASTER_KEY_FILE, ServerSettings, redacted_url

ENV_PREFIX = "MLSTREAM_"
_TYPES = typing.get_type_hints(ServerSettings)
FIELDS = tuple(f for f in dataclasses.fields(ServerSettings))


def flag_of(name: str) -> str:
    return "--trusted-endpoint" if name == "trusted_endpoints" else "--" + name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; absent flags stay absent (so lower layers can fill them)."""
    defaults = ServerSettings()
    for spec in FIELDS:
        kind = _TYPES[spec.name]
        help_text = f"{spec.metadata['help']} (default: {_shown(getattr(defaults, spec.name))})"
        flag = flag_of(spec.name)
        if kind is bool:
            parser.add_argument(flag, dest=spec.name, action="store_true", default=argparse.SUPPRESS,
                                help=help_text)
        elif spec.name == "trusted_endpoints":
            parser.add_argument(flag, dest=spec.name, action="append", metavar="REGEX",
                                default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, dest=spec.name, default=argparse.SUPPRESS, help=help_text,
                                metavar=spec.name.upper())
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="a TOML file of these settings (see mlstream.example.toml)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective settings and where each came from, then exit")


def resolve(flags: Mapping[str, Any], environ: Mapping[str, str],
            config_file: Path | None) -> tuple[ServerSettings, dict[str, str]]:
    """The effective settings and, per setting, which layer set it."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [(f"file {config_file}", _from_file(config_file) if config_file else {}),
              ("environment", _from_env(environ)),
              ("flag", {k: v for k, v in flags.items() if k in _TYPES})]
    for source, layer in layers:
        for name, raw in layer.items():
            values[name] = _convert(name, raw, source)
            sources[name] = source
    return ServerSettings(**values), sources


def describe(settings: ServerSettings, sources: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """``--print-config``: TOML of the effective settings, each with its source; no secrets."""
    lines = ["# effective mlstream serve settings"]
    for spec in FIELDS:
        value, source = getattr(settings, spec.name), sources.get(spec.name, "default")
        if spec.name in ("store", "otel_endpoint") and value:
            value = redacted_url(value)
        if value is None:
            lines.append(f"# {spec.name} is unset  # {source}")
        else:
            lines.append(f"{spec.name} = {_toml(value)}  # {source}")
    master = "set (hidden)" if MASTER_KEY_ENV in environ else f"file {settings.data_dir / MASTER_KEY_FILE}"
    lines.append(f"# master key: {MASTER_KEY_ENV} {master}")
    return "\n".join(lines) + "\n"


def _from_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise BadRequest(f"cannot read the config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(f"the config file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_TYPES))
    if unknown:
        raise BadRequest(f"unknown key(s) in the config file {path}: {', '.join(unknown)}")
    return data


def _from_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: environ[ENV_PREFIX + name.upper()] for name in _TYPES if ENV_PREFIX + name.upper() in environ}


def _convert(name: str, raw: Any, source: str) -> Any:
    kind = _TYPES[name]
    where = f"{name} (from the {source})"
    try:
        if name == "trusted_endpoints":
            if isinstance(raw, str):
                raw = json.loads(raw) if raw.strip().startswith("[") else [raw]
            if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
                raise ValueError("a list of regular expressions")
            for pattern in raw:
                re.compile(pattern)
            return tuple(raw)
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).strip().lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).strip().lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("true or false")
        if kind is int:
            if isinstance(raw, str):
                return int(raw)
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise ValueError("a whole number")
            return raw
        if kind is float:
            if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
                raise ValueError("a number")
            return float(raw)
        if not isinstance(raw, str):
            raise ValueError("a string")
        if name in ("tls_cert", "tls_key") and raw == "":
            return None
        if name in ("data_dir", "tls_cert", "tls_key"):
            return Path(raw).expanduser()
        return raw
    except (ValueError, TypeError, re.error) as exc:
        raise BadRequest(f"invalid value for {where}: {raw!r} ({exc})") from None


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "none" if not value else ", ".join(value)
    return str(value)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(str(value))
