"""A log destination that stops reading never stops the server.

``mlstream serve`` writes its access log to stderr. Here stderr is a pipe that
nobody reads: once the pipe's buffer (64 KiB) is full, a write to it blocks. A
request must still be answered: the line is queued for the log writer thread,
and past the queue's bound dropped and counted.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import threading

from mlstream.logs import MAX_QUEUED_LINES

from ..support.servers import MLSTREAM, terminate
from ..support.timeouts import HANG_GUARD



def test_requests_are_answered_while_stderr_is_a_pipe_nobody_reads(tmp_path):
    read_end, write_end = os.pipe()  # never read until the end
    process = subprocess.Popen(
        [*MLSTREAM, "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=write_end, text=True)
    os.close(write_end)
    try:
        line = process.stdout.readline()
        assert line.startswith("mlstream listening on http://127.0.0.1:"), line
        port = int(line.split()[-1].rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_GUARD)
        # Each access line is over 60 bytes: a few thousand fill the pipe many times over,
        # and more than the queue's bound must be dropped rather than wait.
        for _ in range(MAX_QUEUED_LINES + 2000):
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        metrics = response.read().decode()
        dropped = next(int(float(line.split()[-1])) for line in metrics.splitlines()
                       if line.startswith("mlstream_log_lines_dropped_total "))
        assert dropped > 0
        conn.close()
    finally:
        # Drain the pipe from now on (until the process closes it), so its exit can flush.
        drain = threading.Thread(target=lambda: all(iter(lambda: os.read(read_end, 1 << 16), b"")), daemon=True)
        drain.start()
        try:
            terminate(process)
        finally:
            drain.join(HANG_GUARD)
            os.close(read_end)
    assert process.returncode == 0
