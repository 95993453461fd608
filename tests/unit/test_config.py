"""Where ``serve`` settings come from: flags > MLSTREAM_* environment > TOML file > defaults."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mlstream.app import config
from mlstream.app.cli import build_parser
from mlstream.errors import MLStreamError
from mlstream.settings.server import ServerSettings

from ..support.servers import MLSTREAM, clean_env
from ..support.timeouts import SUBPROCESS_HANG_GUARD

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "mlstream.example.toml"
FIELD_NAMES = {spec.name for spec in dataclasses.fields(ServerSettings)}
# A distinctive master key (base64 of 32 bytes) that must never be printed.
MASTER_KEY = "TUxTVFJFQU1fVEVTVF9NQVNURVJfS0VZX3NlY3JldCE="


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*MLSTREAM, *args], capture_output=True, text=True, timeout=SUBPROCESS_HANG_GUARD,
                          env=env if env is not None else clean_env(), cwd=cwd)


def parse_printed(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``--print-config`` output: its values (as TOML) and, per key, the source its comment names."""
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    values = tomllib.loads("\n".join(kept))
    sources = {}
    for line in kept:
        if not line.strip():
            continue
        match = re.match(r"^(\w+)\s*=.*#\s*(.+?)\s*$", line)
        assert match, f"no source comment on {line!r}"
        sources[match.group(1)] = match.group(2)
    return values, sources


# --- precedence -----------------------------------------------------------------------

def test_precedence_flags_over_env_over_file_over_defaults(tmp_path):
    path = write(tmp_path / "mlstream.toml", """
port = 9301
stream_backlog = 11
heartbeat_interval = 3.5
drain_timeout = 7.0
log_level = "DEBUG"
""")
    environ = {"MLSTREAM_PORT": "9302", "MLSTREAM_STREAM_BACKLOG": "22", "MLSTREAM_HEARTBEAT_INTERVAL": "4.5"}
    flags = {"port": "9303"}
    settings, sources = config.resolve(flags, environ, path)

    assert settings.port == 9303 and sources["port"] == "flag"                      # flag > env > file
    assert settings.stream_backlog == 22 and sources["stream_backlog"] == "environment"   # env > file
    assert settings.heartbeat_interval == 4.5 and sources["heartbeat_interval"] == "environment"
    assert settings.drain_timeout == 7.0 and "file" in sources["drain_timeout"]      # file > default
    assert str(path) in sources["drain_timeout"]
    assert settings.log_level == "DEBUG" and "file" in sources["log_level"]
    defaults = ServerSettings()
    assert settings.stream_queue_chunks == defaults.stream_queue_chunks            # default
    assert settings.max_body_bytes == defaults.max_body_bytes
    assert "stream_queue_chunks" not in sources and "max_body_bytes" not in sources


def test_each_layer_alone_and_types_converted(tmp_path):
    path = write(tmp_path / "f.toml", 'allow_private_endpoints = true\ndata_dir = "~/somewhere"\n')
    settings, _ = config.resolve({}, {}, path)
    assert settings.allow_private_endpoints is True
    assert settings.data_dir == Path.home() / "somewhere"

    settings, sources = config.resolve({}, {"MLSTREAM_ALLOW_PRIVATE_ENDPOINTS": "true",
                                            "MLSTREAM_CLIENT_STALL_TIMEOUT": "2.5",
                                            "MLSTREAM_LOG_FORMAT": "json"}, None)
    assert settings.allow_private_endpoints is True
    assert settings.client_stall_timeout == 2.5
    assert settings.log_format == "json"
    assert set(sources.values()) == {"environment"}

    settings, sources = config.resolve({}, {}, None)
    assert settings == ServerSettings() and sources == {}


def test_a_bool_flag_beats_a_false_in_env_and_file(tmp_path):
    path = write(tmp_path / "f.toml", "allow_private_endpoints = false\n")
    args = build_parser().parse_args(["serve", "--allow-private-endpoints"])
    settings, sources = config.resolve(vars(args), {"MLSTREAM_ALLOW_PRIVATE_ENDPOINTS": "false"}, path)
    assert settings.allow_private_endpoints is True and sources["allow_private_endpoints"] == "flag"
    # and env false beats file true
    path = write(tmp_path / "g.toml", "allow_private_endpoints = true\n")
    settings, sources = config.resolve({}, {"MLSTREAM_ALLOW_PRIVATE_ENDPOINTS": "0"}, path)
    assert settings.allow_private_endpoints is False and sources["allow_private_endpoints"] == "environment"


def test_precedence_through_the_cli(tmp_path):
    path = write(tmp_path / "mlstream.toml", """
port = 9301
stream_backlog = 11
drain_timeout = 7.0
max_body_bytes = 4096
""")
    env = clean_env(MLSTREAM_PORT="9302", MLSTREAM_STREAM_BACKLOG="22", MLSTREAM_MASTER_KEY=MASTER_KEY)
    result = run_cli("serve", "--config", str(path), "--port", "9303", "--print-config", env=env)
    assert result.returncode == 0, result.stderr
    values, sources = parse_printed(result.stdout)
    assert values["port"] == 9303 and sources["port"] == "flag"
    assert values["stream_backlog"] == 22 and sources["stream_backlog"] == "environment"
    assert values["drain_timeout"] == 7.0 and sources["drain_timeout"].startswith("file")
    assert str(path) in sources["drain_timeout"]
    assert values["max_body_bytes"] == 4096 and sources["max_body_bytes"].startswith("file")
    assert values["stream_queue_chunks"] == 64 and sources["stream_queue_chunks"] == "default"
    assert values["host"] == "127.0.0.1" and sources["host"] == "default"


# --- --print-config ------------------------------------------------------------------

def test_print_config_masks_a_database_password() -> None:
    settings, sources = config.resolve({"store": "postgresql://ml:s3cr%2Ft@db.internal:5432/ml"}, {}, None)
    out = config.describe(settings, sources, {})
    assert "s3cr" not in out
    assert 'store = "postgresql://ml:***@db.internal:5432/ml"  # flag' in out


def test_workers_and_store_are_checked() -> None:
    for bad in ({"workers": "0"}, {"workers": "many"}, {"store": "mysql://db/x"}):
        with pytest.raises(MLStreamError):
            config.resolve(bad, {}, None)
    assert config.resolve({"workers": "auto"}, {}, None)[0].workers == "auto"


def test_print_config_is_toml_with_every_setting_and_its_source_and_hides_the_master_key(tmp_path):
    path = write(tmp_path / "mlstream.toml", 'trusted_endpoints = ["^https://a\\\\.example/.*$"]\n'
                                             'log_format = "json"\n')
    env = clean_env(MLSTREAM_MASTER_KEY=MASTER_KEY, MLSTREAM_DRAIN_TIMEOUT="3")
    result = run_cli("serve", "--config", str(path), "--print-config", "--log-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert MASTER_KEY not in out and MASTER_KEY not in result.stderr
    assert MASTER_KEY[:16] not in out  # not even a prefix of it
    assert "MLSTREAM_MASTER_KEY" in out  # says where the key comes from, without its value

    values, sources = parse_printed(out)
    unset = {name for name in FIELD_NAMES
             if re.search(rf"^#\s*{name}\b.*unset", out, re.MULTILINE)}
    assert set(values) | unset == FIELD_NAMES, (set(values), unset)
    assert unset == {"tls_cert", "tls_key"}
    assert values["trusted_endpoints"] == ["^https://a\\.example/.*$"]
    assert sources["trusted_endpoints"].startswith("file") and sources["log_format"].startswith("file")
    assert values["log_format"] == "json"
    assert values["drain_timeout"] == 3.0 and sources["drain_timeout"] == "environment"
    assert values["log_level"] == "WARNING" and sources["log_level"] == "flag"
    assert values["stream_workers"] == ServerSettings().stream_workers and sources["stream_workers"] == "default"
    assert sources["port"] == "default"


def test_print_config_without_env_key_names_the_key_file_not_its_contents(tmp_path):
    result = run_cli("serve", "--data-dir", str(tmp_path / "data"), "--print-config")
    assert result.returncode == 0, result.stderr
    values, sources = parse_printed(result.stdout)
    assert values["data_dir"] == str(tmp_path / "data") and sources["data_dir"] == "flag"
    assert "master.key" in result.stdout
    assert not (tmp_path / "data").exists()  # printing the config starts nothing


# --- unknown keys --------------------------------------------------------------------

def test_unknown_keys_in_the_file_are_an_error_naming_each(tmp_path):
    path = write(tmp_path / "typo.toml", 'port = 9200\nstream_worker = 4\nprot = 1\n[server]\nhost = "x"\n')
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {}, path)
    for name in ("stream_worker", "prot", "server"):
        assert name in caught.value.reason
    assert str(path) in caught.value.reason


def test_unknown_keys_through_the_cli_exit_non_zero_without_a_traceback(tmp_path):
    path = write(tmp_path / "typo.toml", 'stream_worker = 4\nheartbeat = 3\n')
    result = run_cli("serve", "--config", str(path), "--print-config")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "stream_worker" in result.stderr and "heartbeat" in result.stderr
    assert result.stdout == ""
    # and the same without --print-config: serve refuses to start
    result = run_cli("serve", "--config", str(path), "--port", "0", "--data-dir", str(tmp_path / "d"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "stream_worker" in result.stderr and "heartbeat" in result.stderr


def test_a_missing_or_broken_config_file_is_a_clear_error(tmp_path):
    result = run_cli("serve", "--config", str(tmp_path / "nope.toml"), "--print-config")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "nope.toml" in result.stderr
    broken = write(tmp_path / "broken.toml", "port = \n")
    result = run_cli("serve", "--config", str(broken), "--print-config")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "broken.toml" in result.stderr and "TOML" in result.stderr


# --- bad values ----------------------------------------------------------------------

def test_a_string_for_stream_workers_in_env_names_the_key_and_the_environment():
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {"MLSTREAM_STREAM_WORKERS": "lots"}, None)
    reason = caught.value.reason
    assert "stream_workers" in reason and "environment" in reason and "lots" in reason


def test_a_bool_for_port_in_toml_names_the_key_and_the_file(tmp_path):
    path = write(tmp_path / "bad.toml", "port = true\n")
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {}, path)
    reason = caught.value.reason
    assert "port" in reason and "file" in reason and str(path) in reason


def test_bad_values_through_the_cli_exit_non_zero_without_a_traceback(tmp_path):
    result = run_cli("serve", "--print-config", env=clean_env(MLSTREAM_STREAM_WORKERS="lots"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "stream_workers" in result.stderr and "environment" in result.stderr

    path = write(tmp_path / "bad.toml", "port = true\n")
    result = run_cli("serve", "--config", str(path), "--print-config")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "port" in result.stderr and str(path) in result.stderr

    result = run_cli("serve", "--port", "eighty", "--print-config")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "port" in result.stderr and "flag" in result.stderr


@pytest.mark.parametrize("text, key", [
    ("port = 9200.5\n", "port"),                 # an int setting must not silently truncate a float
    ("stream_workers = 2.7\n", "stream_workers"),
    ('allow_private_endpoints = "maybe"\n', "allow_private_endpoints"),
    ("trusted_endpoints = [1, 2]\n", "trusted_endpoints"),
    ('trusted_endpoints = "^https://x/.*$"\n', None),   # a single string is accepted as one regex
    ("host = 5\n", "host"),
    ('log_format = "xml"\n', "log-format"),
])
def test_bad_values_in_the_file(tmp_path, text, key):
    path = write(tmp_path / "bad.toml", text)
    if key is None:
        settings, _ = config.resolve({}, {}, path)
        assert settings.trusted_endpoints == ("^https://x/.*$",)
        return
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {}, path)
    assert key in caught.value.reason


def test_an_invalid_regex_in_trusted_endpoints_is_a_config_error():
    # Accepting it would only fail later, on the first connector call.
    with pytest.raises(MLStreamError) as caught:
        config.resolve({"trusted_endpoints": ["^https://(unclosed"]}, {}, None)
    assert "trusted_endpoints" in caught.value.reason and "flag" in caught.value.reason


def test_a_bad_bool_in_env_names_the_key():
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {"MLSTREAM_ALLOW_PRIVATE_ENDPOINTS": "maybe"}, None)
    assert "allow_private_endpoints" in caught.value.reason and "environment" in caught.value.reason


# --- trusted_endpoints from every layer -----------------------------------------------

def test_trusted_endpoints_from_a_toml_array(tmp_path):
    path = write(tmp_path / "t.toml", "trusted_endpoints = ['^http://127\\.0\\.0\\.1:\\d+/.*$', '^https://b/.*$']\n")
    settings, sources = config.resolve({}, {}, path)
    assert settings.trusted_endpoints == (r"^http://127\.0\.0\.1:\d+/.*$", "^https://b/.*$")
    assert sources["trusted_endpoints"].startswith("file")


def test_trusted_endpoints_from_an_env_json_array():
    settings, sources = config.resolve(
        {}, {"MLSTREAM_TRUSTED_ENDPOINTS": '["^https://a/.*$", "^http://127\\\\.0\\\\.0\\\\.1:\\\\d+/.*$"]'}, None)
    assert settings.trusted_endpoints == ("^https://a/.*$", r"^http://127\.0\.0\.1:\d+/.*$")
    assert sources["trusted_endpoints"] == "environment"


def test_trusted_endpoints_from_a_single_env_regex():
    settings, _ = config.resolve({}, {"MLSTREAM_TRUSTED_ENDPOINTS": r"^http://127\.0\.0\.1:\d+/.*$"}, None)
    assert settings.trusted_endpoints == (r"^http://127\.0\.0\.1:\d+/.*$",)


def test_trusted_endpoints_from_a_repeated_flag_win_over_env_and_file(tmp_path):
    path = write(tmp_path / "t.toml", "trusted_endpoints = ['^https://file/.*$']\n")
    args = build_parser().parse_args(["serve", "--trusted-endpoint", "^https://a/.*$",
                                      "--trusted-endpoint", "^https://b/.*$", "--config", str(path)])
    settings, sources = config.resolve(vars(args), {"MLSTREAM_TRUSTED_ENDPOINTS": "^https://env/.*$"}, args.config)
    assert settings.trusted_endpoints == ("^https://a/.*$", "^https://b/.*$")
    assert sources["trusted_endpoints"] == "flag"


def test_trusted_endpoints_env_that_is_broken_json_is_a_clear_error():
    with pytest.raises(MLStreamError) as caught:
        config.resolve({}, {"MLSTREAM_TRUSTED_ENDPOINTS": '["^https://a/.*$",'}, None)
    assert "trusted_endpoints" in caught.value.reason and "environment" in caught.value.reason


# --- mlstream.example.toml ------------------------------------------------------------

def _example_keys(text: str) -> tuple[set[str], set[str]]:
    """(keys set in the example, keys shown but commented out)."""
    active = set(tomllib.loads(text))
    commented = set(re.findall(r"^#\s*([a-z_]+)\s*=", text, re.MULTILINE))
    return active, commented


def test_the_example_config_documents_exactly_the_settings():
    text = EXAMPLE.read_text(encoding="utf-8")
    active, commented = _example_keys(text)
    assert active | commented == FIELD_NAMES, (FIELD_NAMES ^ (active | commented))
    assert {"tls_cert", "tls_key"} <= commented and not {"tls_cert", "tls_key"} & active
    # each key is preceded by its comment
    lines = text.splitlines()
    for name in FIELD_NAMES:
        index = next(i for i, line in enumerate(lines) if re.match(rf"^#?\s*{name}\s*=", line))
        assert index > 0 and lines[index - 1].startswith("#"), f"{name} has no comment above it"
    # trusted_endpoints is a TOML array
    assert tomllib.loads(text)["trusted_endpoints"] == []


def test_the_example_config_loads_to_the_defaults():
    settings, sources = config.resolve({}, {}, EXAMPLE)
    assert settings == ServerSettings()
    assert set(sources) == set(tomllib.loads(EXAMPLE.read_text(encoding="utf-8")))


def test_the_example_config_through_the_cli_gives_the_defaults(tmp_path):
    result = run_cli("serve", "--config", str(EXAMPLE), "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    values, sources = parse_printed(result.stdout)
    defaults = ServerSettings()
    for name, value in values.items():
        expected = getattr(defaults, name)
        if isinstance(expected, Path):
            expected = str(expected)
        elif isinstance(expected, tuple):
            expected = list(expected)
        assert value == expected, name
