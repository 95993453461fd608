"""Claude Code itself (``@anthropic-ai/claude-code`` from npm) answering through mlstream:
``claude -p`` with ``ANTHROPIC_BASE_URL`` at the server on loopback, an mlstream key as its
API key, telemetry and every other non-essential call off, over an OpenAI-interface model.

The package is installed once into a cache directory this test manages
(``MLSTREAM_TEST_CACHE``, else ``~/.cache/mlstream-tests``), at CLAUDE_CODE_VERSION.
Skipped only where npm is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mlstream.testing.fake_openai import DEFAULT_TEXT

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.servers import create_key

CLAUDE_CODE_VERSION = "2.1.197"
INSTALL_TIMEOUT = 300.0  # seconds for npm to fetch the package (about 10 s here)
RUN_TIMEOUT = 120.0      # seconds for one `claude -p` (about 10 s)
PROMPT = "Who is Hamlet?"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")]


def claude_binary() -> Path:
    """The cached ``claude`` of CLAUDE_CODE_VERSION, installed by npm on first use."""
    cache = Path(os.environ.get("MLSTREAM_TEST_CACHE") or Path.home() / ".cache" / "mlstream-tests")
    prefix = cache / f"claude-code-{CLAUDE_CODE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                                 "--loglevel", "error", f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
                                capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        assert result.returncode == 0, result.stderr
    return binary


def run_claude(binary: Path, home: Path, base_url: str, key: str, model: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
           "ANTHROPIC_API_KEY": key, "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CI": "1"}
    return subprocess.run([str(binary), "-p", PROMPT, "--model", model], env=env, cwd=home, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)


def test_claude_code_answers_through_mlstream(make_server, tmp_path, fake):
    binary = claude_binary()
    server = make_server()
    model_id = Client(server.url).register(Client(server.url).create_connector(openai_connector(fake)),
                                           name="fake-gpt")
    key = create_key(tmp_path / "data", "user", "claude-code")
    home = tmp_path / "home"
    home.mkdir()
    result = run_claude(binary, home, server.url, key, model_id)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert DEFAULT_TEXT in result.stdout
    sent = fake.stats.requests[-1].body
    assert sent["stream"] is True and sent["tools"]  # Claude Code's own tools, as functions
    assert any(PROMPT in str(message["content"]) for message in sent["messages"] if message["role"] == "user")
    assert fake.stats.requests and all(request.body["model"] == "gpt-3.5-turbo" for request in fake.stats.requests)
