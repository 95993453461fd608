"""The processes a benchmark starts, and what it reads about them.

Every child runs in its own session (its own process group), so that a failure
anywhere can kill the whole group; :class:`Processes` is a context manager that
stops everything it started, in reverse order, whatever happened. Servers bind
127.0.0.1 only.

``BENCH_MLSTREAM_SRC=<dir>`` runs the mlstream servers from another source tree
(the directory holding its ``mlstream`` package, e.g. an older commit unpacked
with ``git archive <commit> | tar -x -C <dir>``): their working directory and
``PYTHONPATH`` point there. The fake provider and the bench stay this tree's.

    Processes          owns the children: start_fake(), start_mlstream(), close()
      Child            one subprocess: ready line, /proc figures, stop (TERM, then KILL the group)
    Admin              a tiny blocking JSON client (http.client) for setup calls and /metrics
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

API_KEY = "sk-bench-key"
SRC_ENV = "BENCH_MLSTREAM_SRC"
LOOPBACK_TRUST = r"^http://127\.0\.0\.1:.*$"
READY_SECONDS = 20.0          # a child that has not printed its ready line by then is broken
STOP_SECONDS = 15.0           # SIGTERM grace before SIGKILL of the group
CLK_TCK = os.sysconf("SC_CLK_TCK")

SEED_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Can you summarize Prince Hamlet of William Shakespeare in around 1000 words?"},
]
STREAM_INTERFACE = "openai/v1/chat/completions"


def raise_nofile_limit() -> int:
    """Raise this process's open-file soft limit to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(frozen=True)
class ProcSample:
    rss_kb: int
    threads: int
    cpu: float        # user + system CPU seconds since the process started


def proc_sample(pid: int) -> ProcSample:
    """RSS (VmRSS), thread count and CPU seconds of ``pid`` from /proc."""
    rss = threads = 0
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # the command name (field 2) may hold spaces: split after its closing paren
    fields = stat[stat.rindex(b")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK   # utime, stime
    return ProcSample(rss, threads, cpu)


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid``: the processes whose parent it is (/proc/<n>/stat).

    One read per process on the machine. The children file of each of ``pid``'s threads
    was one read per thread: a server streaming to a thousand clients has a thousand, and
    reading them took 17-50 ms, which stalled the load generator's loop at every sample.
    """
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited since the listing
        # after the command name (which may hold spaces and parens): state, then the parent's pid
        if int(stat[stat.rindex(b")") + 2:].split(None, 2)[1]) == pid:
            pids.append(int(entry))
    return pids


def tcp_rows() -> Iterator[list[str]]:
    """The fields of every TCP socket's line in /proc/net/tcp and tcp6 (unreadable ones skipped)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            yield line.split()


def tcp_port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def _socket_ports() -> dict[int, tuple[int, int, str]]:
    """{socket inode: (local port, remote port, state hex)} of every TCP socket."""
    out: dict[int, tuple[int, int, str]] = {}
    for parts in tcp_rows():
        try:
            out[int(parts[9])] = (tcp_port(parts[1]), tcp_port(parts[2]), parts[3])
        except (IndexError, ValueError):
            pass
    return out


def proc_fds(pid: int, server_port: int | None = None, upstream_port: int | None = None) -> dict[str, int]:
    """Open file descriptors of ``pid`` (/proc/<pid>/fd), split by what they are.

    ``clients``: TCP connections accepted on ``server_port`` (not the listener);
    ``upstream``: TCP connections to ``upstream_port``; ``other``: the rest
    (the listener, files, pipes, epoll, socket pairs). Descriptors that close
    while they are read are left out.
    """
    names: list[str] = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            names.append(os.readlink(f"{fd_dir}/{fd}"))
        except OSError:
            pass
    ports = _socket_ports() if server_port or upstream_port else {}
    clients = upstream = 0
    for name in names:
        if name.startswith("socket:["):
            local, remote, state = ports.get(int(name[8:-1]), (0, 0, ""))
            if state == "0A":        # LISTEN
                continue
            if server_port and local == server_port:
                clients += 1
            elif upstream_port and remote == upstream_port:
                upstream += 1
    return {"total": len(names), "clients": clients, "upstream": upstream, "other": len(names) - clients - upstream}


class Child:
    """A started subprocess that announces itself with one line on stdout."""

    def __init__(self, name: str, argv: list[str], ready_prefix: str, log_dir: Path, *,
                 cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._log, start_new_session=True, cwd=cwd, env=env)
        self.pid = self.proc.pid
        try:
            line = self._ready_line(READY_SECONDS)
            if not line.startswith(ready_prefix):
                raise RuntimeError(f"{name} did not start: {line!r}; see {self.log_path}: {self.log_tail()}")
        except BaseException:
            self.kill()
            raise
        self.url = line.split()[-1]
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))

    def _ready_line(self, seconds: float) -> str:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        data = b""
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"{self.name} printed no ready line within {seconds:.0f} s: "
                                   f"{self.log_tail()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                piece = os.read(fd, 4096)
                if not piece:
                    raise RuntimeError(f"{self.name} exited before it was ready: {self.log_tail()}")
                data += piece
        return data.split(b"\n", 1)[0].decode(errors="replace").strip()

    def sample(self) -> ProcSample:
        """This process and its children (the workers of ``serve --workers N``), summed."""
        total = proc_sample(self.pid)
        for pid in child_pids(self.pid):
            try:
                child = proc_sample(pid)
            except OSError:
                continue  # exited between the listing and the read
            total = ProcSample(total.rss_kb + child.rss_kb, total.threads + child.threads, total.cpu + child.cpu)
        return total

    def fds(self, upstream_port: int | None = None) -> dict[str, int]:
        return proc_fds(self.pid, self.address[1], upstream_port)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> int | None:
        """SIGTERM, wait, then SIGKILL the whole group. Returns the exit code (None if killed)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.proc.returncode
        self._kill_group()  # anything the child itself left behind
        self._close_files()
        return code

    def kill(self) -> None:
        self._kill_group()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._close_files()

    def _kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_files(self) -> None:
        if self.proc.stdout and not self.proc.stdout.closed:
            self.proc.stdout.close()
        if not self._log.closed:
            self._log.close()


def mlstream_source() -> str | None:
    """The source directory the mlstream servers run from (``BENCH_MLSTREAM_SRC``), or None: this tree."""
    src = os.environ.get(SRC_ENV)
    if not src:
        return None
    path = Path(src).resolve()
    if not (path / "mlstream" / "__init__.py").is_file():
        raise RuntimeError(f"{SRC_ENV}={src}: no mlstream package there")
    return str(path)


class Processes:
    """Start the fake provider and mlstream servers; stop them all on exit."""

    def __init__(self, workdir: Path | None = None, server_processes: int = 1) -> None:
        self.server_processes = server_processes  # `serve --workers` of every mlstream started
        self.server_extra: list[str] = []          # flags every mlstream started gets (bench --otel)
        self._tmp = tempfile.TemporaryDirectory(prefix="mlstream-bench-") if workdir is None else None
        self.workdir = Path(self._tmp.name) if self._tmp else workdir
        self.children: list[Child] = []
        self.exit_codes: dict[str, int | None] = {}
        self._count = 0

    def start_fake(self, name: str = "fake", module: str = "mlstream.testing.fake_openai",
                   args: tuple[str, ...] = ("--api-key", API_KEY)) -> Child:
        """A fake provider (``python -m <module> --port 0 <args>``) in its own process."""
        argv = [sys.executable, "-m", module, "--port", "0", *args]
        return self._start(name, argv, "http://")

    def start_mlstream(self, name: str = "mlstream", *, workers: int | None = None, backlog: int | None = None,
                       queue_chunks: int | None = None, extra: list[str] | None = None) -> Child:
        self._count += 1
        data_dir = self.workdir / f"data-{name}-{self._count}"
        argv = [sys.executable, "-m", "mlstream", "serve", "--port", "0", "--data-dir", str(data_dir),
                "--trusted-endpoint", LOOPBACK_TRUST, "--allow-private-endpoints",
                "--drain-timeout", "2", "--log-level", "WARNING"]
        if workers is not None:
            argv += ["--stream-workers", str(workers)]
        if backlog is not None:
            argv += ["--stream-backlog", str(backlog)]
        if queue_chunks is not None:
            argv += ["--stream-queue-chunks", str(queue_chunks)]
        if self.server_processes > 1:
            argv += ["--workers", str(self.server_processes)]
        argv += [*self.server_extra, *(extra or [])]
        src = mlstream_source()
        env = None
        if src is not None:
            env = dict(os.environ)
            env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return self._start(name, argv, "mlstream listening on http://", cwd=src, env=env)

    def _start(self, name: str, argv: list[str], ready: str, *, cwd: str | None = None,
               env: dict[str, str] | None = None) -> Child:
        child = Child(name, argv, ready, self.workdir, cwd=cwd, env=env)
        self.children.append(child)
        return child

    def stop(self, child: Child) -> None:
        if child in self.children:
            self.children.remove(child)
            self.exit_codes[child.name] = child.stop()

    def close(self) -> None:
        while self.children:
            self.stop(self.children[-1])
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "Processes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- admin client


class Admin:
    """Blocking JSON calls to one server over a keep-alive connection (setup, /metrics)."""

    def __init__(self, address: tuple[str, int], timeout: float = 20.0) -> None:
        self.address = address
        self._conn = http.client.HTTPConnection(*address, timeout=timeout)

    def _exchange(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in (1, 2):
            try:
                self._conn.request(method, path, body=data, headers=headers)
                response = self._conn.getresponse()
                return response.status, response.read()
            except (ConnectionError, http.client.HTTPException):
                # The server closed the kept-alive connection (idle limit): once more, anew.
                self._conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = self._exchange(method, path, json.dumps(body).encode() if body is not None else None)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, reply = self.call(method, path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path} answered {status}: {reply}")
        return reply

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {name (labels included): value}."""
        text = self._exchange("GET", "/metrics", None)[1].decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    values[name] = float(value)
                except ValueError:
                    pass
        return values

    def close(self) -> None:
        self._conn.close()


def openai_connector(fake_address: tuple[str, int], model: str, *, api_key: str = API_KEY,
                     max_connection: int | None = None) -> dict[str, Any]:
    """The seed's OpenAI connector, pointed at the fake (as tests/integration/conftest.py does)."""
    body: dict[str, Any] = {
        "name": "OpenAI Chat Connector",
        "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": f"{fake_address[0]}:{fake_address[1]}", "model": model},
        "credential": {"openAI_key": api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}/v1/chat/completions",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }
    if max_connection is not None:
        body["client_config"] = {"max_connection": max_connection}
    return body


EMBEDDING_MODEL = "text-embedding-ada-002"


def openai_embedding_connector(fake_address: tuple[str, int], *, api_key: str = API_KEY) -> dict[str, Any]:
    """ml-commons' OpenAI embedding blueprint (openai_connector_embedding_blueprint.md), pointed at the fake."""
    return {
        "name": "OpenAI embedding", "description": "The connector to OpenAI embeddings", "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": f"{fake_address[0]}:{fake_address[1]}", "model": EMBEDDING_MODEL},
        "credential": {"openAI_key": api_key},
        "actions": [{
            "action_type": "predict", "method": "POST", "url": "http://${parameters.endpoint}/v1/embeddings",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"input\": ${parameters.input}, \"model\": \"${parameters.model}\" }",
            "pre_process_function": "connector.pre_process.openai.embedding",
            "post_process_function": "connector.post_process.openai.embedding",
        }],
    }


def register_model(admin: Admin, fake_address: tuple[str, int], model: str, *, api_key: str = API_KEY,
                   max_connection: int | None = None) -> str:
    """Create a connector for ``model`` (a fake model name with knobs) and a deployed model on it."""
    return register_connector(admin, openai_connector(fake_address, model, api_key=api_key,
                                                      max_connection=max_connection), f"bench {model}")


def register_connector(admin: Admin, connector: dict[str, Any], name: str) -> str:
    """Create ``connector`` and a deployed model on it; the model's id."""
    connector_id = admin.ok("POST", "/_plugins/_ml/connectors/_create", connector)["connector_id"]
    return admin.ok("POST", "/_plugins/_ml/models/_register?deploy=true",
                    {"name": name, "function_name": "remote", "description": "benchmark model",
                     "connector_id": connector_id})["model_id"]
