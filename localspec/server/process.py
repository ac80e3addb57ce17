"""Run an HTTP server as a child process on a free loopback port (tests and benchmarks).

Used for ``localspec serve`` and for peers such as ``python -m llama_cpp.server``, so a
benchmark drives every server the same way: start, wait until it answers, stop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server child process; a context manager that always stops it.

    Args:
        argv: the command; ``{port}`` in any argument is replaced by the chosen port.
        log_path: the child's stdout and stderr go here (never to a pipe nobody reads).
        ready_path: a GET path that answers 200 once the server is up.
        env: extra environment variables.
        headers: headers for the readiness request (e.g. an API key).
        timeout: seconds to wait for readiness.

    Raises (on enter):
        RuntimeError: the process exited or did not become ready; with the log's tail.
    """

    def __init__(self, argv: Sequence[str], log_path: str | os.PathLike, ready_path: str = "/health",
                 env: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                 timeout: float = 300.0) -> None:
        self.port = free_port()
        self.argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.log_path = Path(log_path)
        self.ready_path = ready_path
        self.env = {**os.environ, **(env or {})}
        self.headers = headers or {}
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _ready(self) -> bool:
        req = urllib.request.Request(self.base_url + self.ready_path, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def __enter__(self) -> "ServerProcess":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + self.timeout
        try:
            while not self._ready():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server was not ready after {self.timeout:.0f} s:\n{self.log_tail()}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Terminate (then kill after 20 s) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()

    def rss_bytes(self) -> int:
        """The child's resident set size (Linux ``/proc``), bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")
