"""A real ``drkernel serve`` in a subprocess (python -m drkernel serve), killable with SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process; ``kill()`` is SIGKILL (no shutdown hooks), ``start()`` restarts it on the
    same port and state directory."""

    def __init__(self, state_dir: Path, *args: str, port: int | None = None, env: dict | None = None):
        self.state_dir = Path(state_dir)
        self.args = list(args)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log = self.state_dir / "server.log"

    def start(self, wait_ready: bool = True, timeout: float = 90.0) -> "Server":
        import httpx

        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **self.env)
        cmd = [sys.executable, "-m", "drkernel", "serve", "--port", str(self.port), "--state-dir",
               str(self.state_dir), "--log-level", "warning", *self.args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        if wait_ready:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
                try:
                    if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            raise RuntimeError(f"server not ready in {timeout}s: {self.log.read_text()[-2000:]}")
        return self

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until the server has answered every job it accepted (queue empty, nothing running):
        a restarted server may still be answering jobs its clients already got from elsewhere."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                health = httpx.get(self.url + "/healthz", timeout=5).json()
                if health.get("queue_depth") == 0 and health.get("running") == 0:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.url} did not drain in {timeout}s")

    def job_rows(self) -> dict[str, tuple[str, int]]:
        """``{job id: (state, attempts)}`` as the server's store holds them (read from its sqlite file)."""
        import sqlite3

        db = sqlite3.connect(self.state_dir / "jobs.sqlite")
        try:
            return {i: (s, a) for i, s, a in db.execute("SELECT id, state, attempts FROM jobs")}
        finally:
            db.close()

    def kill(self) -> None:
        """SIGKILL the server's process group (the server and the candidate processes it runs)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def make_server(tmp_path):
    servers: list[Server] = []

    def make(*args: str, name: str = "server", **kw) -> Server:
        server = Server(tmp_path / name, *args, **kw)
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop()
