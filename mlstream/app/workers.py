"""``mlstream serve --workers N``: N server processes on one port, and their supervisor.

Each worker is a whole ``mlstream serve`` (its own stream pool, upstream pools and
store connections) started as a fresh process, which works the same from the
single-file binary. They listen on one port with ``SO_REUSEPORT``: the kernel
spreads new connections over the workers' own listening sockets, so no accept loop
ever blocks on a connection another worker took. The supervisor holds the port
(bound, never listening) so it stays theirs across restarts.

The supervisor creates and migrates the store (and the master key) once, before any
worker starts, so workers starting together never race to create the same files. It
prints the ``listening`` line once every worker is up, restarts a worker that dies
(with a log line; one that dies before the deployment was first up is started again
at most ``START_ATTEMPTS`` times in all, then the start-up has failed), and forwards
SIGTERM/SIGINT so every worker drains and exits; it exits 0 when they all did.

Workers share a private directory with the supervisor: ``workers`` there says how
many are up (``/readyz`` fails while one is missing), and each worker answers on
``metrics-<slot>.sock`` with its own metrics text, so ``/metrics`` on any worker
returns the sum over all of them (a worker restarted starts its counters at zero).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from ..metrics import merge_expositions
from ..settings.server import ServerSettings

log = logging.getLogger(__name__)

SLOT_ENV = "MLSTREAM_WORKER_SLOT"
DIR_ENV = "MLSTREAM_WORKER_DIR"
PORT_ENV = "MLSTREAM_WORKER_PORT"
# A slot is restarted at most this often, so a worker that dies at start cannot spin.
RESTART_INTERVAL = 1.0
# Before the deployment is first up, a slot whose worker exits is started this many
# times in all: once or twice is a transient (a file another process held), every
# time is a configuration problem (a bad flag, a refused start) that more would repeat.
START_ATTEMPTS = 3
# How long /metrics waits for a sibling's metrics before leaving it out.
PEER_TIMEOUT = 1.0
STATUS_FILE = "workers"


def worker_count(setting: str) -> int:
    return (os.cpu_count() or 1) if setting == "auto" else int(setting)


# --- the worker's side -----------------------------------------------------------------

class WorkerLink:
    """A worker's ties to its siblings: readiness of all, and metrics summed over all."""

    def __init__(self, slot: int, count: int, directory: Path) -> None:
        self.slot, self.count, self.directory = slot, count, directory
        self._listener: socket.socket | None = None
        self._closed = threading.Event()

    @classmethod
    def from_environment(cls, settings: ServerSettings) -> WorkerLink | None:
        if SLOT_ENV not in os.environ:
            return None
        return cls(int(os.environ[SLOT_ENV]), worker_count(settings.workers), Path(os.environ[DIR_ENV]))

    def serve_metrics(self, render: Callable[[], str]) -> None:
        """Answer siblings' /metrics with this worker's own text, on a Unix socket."""
        path = self._socket_path(self.slot)
        path.unlink(missing_ok=True)  # left by the worker this one replaces
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        threading.Thread(target=self._answer, args=(render,), name="mlstream-worker-metrics",
                         daemon=True).start()

    def _answer(self, render: Callable[[], str]) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    conn.sendall(render().encode("utf-8"))
                except OSError:
                    pass  # the asking sibling gave up

    def render_all(self, own: str) -> str:
        """``own`` metrics text plus every live sibling's, summed."""
        texts = [own]
        for slot in range(self.count):
            if slot != self.slot:
                text = self._ask(slot)
                if text is not None:
                    texts.append(text)
        return merge_expositions(texts)

    def _ask(self, slot: int) -> str | None:
        chunks: list[bytes] = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(PEER_TIMEOUT)
                conn.connect(str(self._socket_path(slot)))
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
        except OSError:
            return None  # dead or restarting: its counters are gone with it
        return b"".join(chunks).decode("utf-8")

    def problems(self) -> list[str]:
        """Why the deployment is not ready as a whole (empty when every worker is up)."""
        try:
            up = int((self.directory / STATUS_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            up = 0
        return [] if up >= self.count else [f"{up} of {self.count} workers are up"]

    def _socket_path(self, slot: int) -> Path:
        return self.directory / f"metrics-{slot}.sock"

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()


# --- the supervisor ------------------------------------------------------------------

@dataclasses.dataclass
class _Worker:
    slot: int
    process: subprocess.Popen
    started: float
    attempt: int = 1       # starts of this slot in a row that ended before it was up, plus this one
    up: bool = False
    came_up: bool = False  # printed its listening line at some point


class Supervisor:
    def __init__(self, settings: ServerSettings, argv: Sequence[str]) -> None:
        self.settings = settings
        self.count = worker_count(settings.workers)
        self._argv = list(argv)
        self._directory = _private_directory()
        self._wake = threading.Event()   # a worker exited or came up, or a signal arrived
        self._stop = threading.Event()
        # Guards _workers: the watcher threads mark workers up; the main thread replaces them.
        self._lock = threading.Lock()
        self._workers: dict[int, _Worker] = {}
        self._port_holder = self._hold_port()
        self.port = self._port_holder.getsockname()[1]

    def _hold_port(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        holder = socket.socket(family, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((self.settings.host, self.settings.port))
        return holder

    @property
    def url(self) -> str:
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"{'https' if self.settings.tls_cert else 'http'}://{host}:{self.port}"

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            prepare_state(self.settings)
            for slot in range(self.count):
                self._start(slot)
            announced = startup_failed = False
            while not self._stop.is_set():
                # Timed, as serve's wait (cli.py): a signal handled by another thread runs
                # its handler only when this thread next runs Python.
                if not self._wake.wait(0.5):
                    continue
                self._wake.clear()
                if self._stop.is_set():
                    break
                if not self._replace_dead(starting=not announced):
                    log.error("a worker exited during start-up %d times; stopping the others", START_ATTEMPTS)
                    startup_failed = True
                    break
                up = self._write_status()
                if up == self.count and not announced:
                    announced = True
                    sys.stdout.write(f"mlstream listening on {self.url}\n")
                    sys.stdout.flush()
                    log.info("%d workers up on %s (stream workers per worker: %d)",
                             self.count, self.url, self.settings.stream_workers)
            code = self._shutdown()
            return 2 if startup_failed else code
        finally:
            self._port_holder.close()
            shutil.rmtree(self._directory, ignore_errors=True)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop.set()
        self._wake.set()

    def _command(self) -> list[str]:
        if getattr(sys, "frozen", False):  # the single-file binary runs itself
            return [sys.executable, *self._argv]
        return [sys.executable, "-m", "mlstream", *self._argv]

    def _start(self, slot: int, attempt: int = 1) -> None:
        env = dict(os.environ, **{SLOT_ENV: str(slot), DIR_ENV: str(self._directory), PORT_ENV: str(self.port)})
        # The worker's stdin is a pipe only the supervisor holds: at its end (the supervisor
        # died, even by SIGKILL) the worker shuts down instead of serving on unsupervised.
        process = subprocess.Popen(self._command(), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
        worker = _Worker(slot, process, time.monotonic(), attempt)
        with self._lock:
            self._workers[slot] = worker
        threading.Thread(target=self._watch, args=(worker,), name=f"mlstream-watch-{slot}", daemon=True).start()

    def _watch(self, worker: _Worker) -> None:
        """Wait for the worker's listening line, then for its exit; wake the main loop on each."""
        assert worker.process.stdout is not None
        line = worker.process.stdout.readline()
        if line.startswith("mlstream listening on"):
            with self._lock:
                worker.up = worker.came_up = True
            self._wake.set()
        worker.process.stdout.read()  # nothing more is printed; returns at exit
        worker.process.wait()
        with self._lock:
            worker.up = False
        self._wake.set()

    def _replace_dead(self, *, starting: bool) -> bool:
        """Start a new worker in each dead one's slot; False (none started) when, ``starting``
        (the deployment was never up yet), a slot has used its START_ATTEMPTS."""
        with self._lock:
            dead = [w for w in self._workers.values() if w.process.poll() is not None]
            came_up = {w.slot: w.came_up for w in dead}
        if starting and any(not came_up[w.slot] and w.attempt >= START_ATTEMPTS for w in dead):
            return False
        for worker in dead:
            code = worker.process.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            attempt = 1 if came_up[worker.slot] else worker.attempt + 1
            if came_up[worker.slot]:
                log.warning("worker %d (pid %d) %s; starting a new one", worker.slot, worker.process.pid, how)
            else:
                log.warning("worker %d (pid %d) %s during start-up; starting it again (attempt %d of %d)",
                            worker.slot, worker.process.pid, how, attempt, START_ATTEMPTS)
            wait = RESTART_INTERVAL - (time.monotonic() - worker.started)
            if wait > 0 and self._stop.wait(wait):
                return True
            self._start(worker.slot, attempt)
        return True

    def _write_status(self) -> int:
        with self._lock:
            up = sum(worker.up for worker in self._workers.values())
        status = self._directory / STATUS_FILE
        temporary = status.with_suffix(".new")
        temporary.write_text(f"{up} {self.count}\n")
        temporary.replace(status)  # atomic: a worker never reads half a file
        return up

    def _shutdown(self) -> int:
        log.info("shutting down: %d workers draining open streams for up to %.0f s",
                 self.count, self.settings.drain_timeout)
        (self._directory / STATUS_FILE).write_text(f"0 {self.count}\n")
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        failed = 0
        for worker in workers:
            try:
                code = worker.process.wait(self.settings.drain_timeout + 10)
            except subprocess.TimeoutExpired:
                log.error("worker %d (pid %d) did not stop; killing it", worker.slot, worker.process.pid)
                worker.process.kill()
                code = worker.process.wait()
            failed += code != 0
        return 0 if not failed else 1


def prepare_state(settings: ServerSettings) -> None:
    """Create and migrate the store, the master key and the cluster's identity, once,
    before any worker starts: each worker then only opens what exists. A store that
    cannot be opened (a wrong master key, a database that refuses us) fails here, with
    its own message, before any worker is started."""
    from ..store.cluster import cluster_uuid
    from ..access.credentials import open_codec
    from ..store.open import open_store

    store = open_store(settings.store, settings.data_dir)
    try:
        open_codec(store, settings.data_dir)
        cluster_uuid(store)
        store.usage()  # the usage tables too (SQLite: a file of their own)
    finally:
        store.close()


# A Unix socket's path must fit in sockaddr_un (108 bytes on Linux, less elsewhere).
MAX_SOCKET_PATH = 100


def _private_directory() -> Path:
    """A new mode-0700 directory whose socket paths fit: under $TMPDIR when it is short
    enough, else under /tmp."""
    for parent in (tempfile.gettempdir(), "/tmp"):
        if len(parent) + len("/mlstream-workers-XXXXXXXX/metrics-1000.sock") <= MAX_SOCKET_PATH:
            return Path(tempfile.mkdtemp(prefix="mlstream-workers-", dir=parent))
    raise OSError("no temporary directory with a path short enough for the workers' sockets")


def stop_when_orphaned(stop: threading.Event) -> None:
    """In a worker: set ``stop`` when the supervisor's end of stdin closes."""
    def watch() -> None:
        # The raw descriptor: a buffered read would hold sys.stdin's lock at interpreter exit.
        for _ in iter(lambda: os.read(0, 4096), b""):
            pass
        stop.set()

    threading.Thread(target=watch, name="mlstream-supervisor-watch", daemon=True).start()


def worker_settings(settings: ServerSettings) -> ServerSettings:
    """A worker's settings: the port its supervisor holds (``--port 0`` resolved once)."""
    return dataclasses.replace(settings, port=int(os.environ[PORT_ENV]))
