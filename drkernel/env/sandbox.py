"""The candidate's process, seen from the grader.

Every candidate runs in a fresh process (``python -m drkernel.env.worker``) in its own process
group. The grader enforces, from outside:

* a wall-clock deadline per request — on expiry: SIGTERM to the group, a grace period, SIGKILL to
  the group, pipes drained (no zombie, no orphaned grandchild in the group);
* a resident-memory cap on the process (polled; exceeding it kills the group);
* an output cap: stdout and stderr share one pipe whose tail (64 KiB) is kept; past the cap the
  process is killed as a flood;
* JSON-only messages with a size cap: nothing the candidate's process sends is unpickled.

Failures of the candidate raise :class:`CandidateFailure` (a verdict); failures of the grader to
start a worker raise :class:`~drkernel.env.result.EnvironmentFailure`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from drkernel.env.result import EnvironmentFailure

MAX_MESSAGE_BYTES = 8 << 20
TAIL_BYTES = 64 << 10
GRACE_S = 2.0


class CandidateFailure(Exception):
    """The candidate's process crashed, hung, flooded output or ran out of memory."""

    def __init__(self, kind: str, message: str, output_tail: str = ""):
        super().__init__(message)
        self.kind = kind  # "timeout" | "crash" | "flood" | "memory" | "protocol"
        self.message = message
        self.output_tail = output_tail


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _group_pids(pgid: int) -> list[int]:
    pids = []
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                    if int(fields[2]) == pgid:
                        pids.append(int(entry))
                except (OSError, ValueError, IndexError):
                    continue
    except OSError:
        pass
    return pids


class CandidateProcess:
    """One candidate process. Use as a context manager; :meth:`close` always kills the group."""

    def __init__(self, workdir: Path, env: dict[str, str], memory_limit_mb: int, output_limit_bytes: int,
                 start_timeout_s: float = 120.0):
        self.workdir = workdir
        self.memory_limit = memory_limit_mb << 20
        self.output_limit = output_limit_bytes
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.output_bytes = 0
        self.failure: CandidateFailure | None = None
        self._closed = False
        parent_sock, child_sock = socket.socketpair()
        cmd = [sys.executable, "-m", "drkernel.env.worker", str(child_sock.fileno()), str(workdir)]
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=[child_sock.fileno()], start_new_session=True, env=env, cwd=str(workdir),
                preexec_fn=_child_limits,
            )
        except OSError as exc:
            raise EnvironmentFailure(f"cannot start the candidate process: {exc}") from exc
        finally:
            child_sock.close()
        self.pgid = self.proc.pid
        self.conn = Connection(parent_sock.detach())
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        self._watch_stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_memory, daemon=True)
        self._watcher.start()
        try:
            hello = self._recv(start_timeout_s, what="start-up")
        except CandidateFailure as exc:
            self.close()
            raise EnvironmentFailure(f"the evaluation worker did not start: {exc.message}\n{exc.output_tail}") from exc
        if not hello.get("ok"):
            self.close()
            raise EnvironmentFailure(f"the evaluation worker failed to start: {hello.get('error')}")

    # -- background threads ------------------------------------------------------------------------
    def _read_output(self) -> None:
        stream = self.proc.stdout
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            self.output_bytes += len(chunk)
            self._tail.append(chunk)
            self._tail_len += len(chunk)
            while self._tail_len - len(self._tail[0]) >= TAIL_BYTES:
                self._tail_len -= len(self._tail.popleft())
            if self.output_bytes > self.output_limit and self.failure is None:
                self.failure = CandidateFailure("flood", f"output flood: more than {self.output_limit} bytes "
                                                "written to stdout/stderr")
                self._kill_group()

    def _watch_memory(self) -> None:
        # The candidate's RSS is read every 50 ms; finding other members of its process group means
        # scanning all of /proc, so that list is refreshed once a second.
        others: list[int] = []
        polls = 0
        while not self._watch_stop.wait(0.05):
            if self.proc.poll() is not None:
                return
            if polls % 20 == 0:
                others = [p for p in _group_pids(self.pgid) if p != self.proc.pid]
            polls += 1
            rss = _rss_bytes(self.proc.pid) + sum(_rss_bytes(p) for p in others)
            if rss > self.memory_limit and self.failure is None:
                self.failure = CandidateFailure("memory", f"memory limit exceeded: {rss >> 20} MiB resident "
                                                f"(limit {self.memory_limit >> 20} MiB)")
                self._kill_group()
                return

    def output_tail(self, limit: int = 4000) -> str:
        text = b"".join(self._tail).decode("utf-8", errors="replace")
        return text[-limit:]

    # -- messaging ----------------------------------------------------------------------------------
    def request(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self.failure:
            raise self.failure
        try:
            self.conn.send_bytes(json.dumps(msg).encode())
        except (OSError, ValueError) as exc:
            raise self._died(f"could not send request: {exc}") from None
        return self._recv(timeout_s, what=msg.get("op", "request"))

    def _recv(self, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.failure:
                raise self.failure
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.failure = CandidateFailure("timeout", f"timed out after {timeout_s:.0f}s during {what}")
                self._kill_group()
                raise self.failure
            try:
                ready = self.conn.poll(min(remaining, 0.1))
            except (OSError, EOFError):
                raise self._died(f"connection lost during {what}") from None
            if ready:
                try:
                    raw = self.conn.recv_bytes(MAX_MESSAGE_BYTES)
                except (EOFError, OSError):
                    raise self._died(f"process exited during {what}") from None
                try:
                    data = json.loads(raw)
                except ValueError:
                    raise self._protocol(f"malformed reply during {what}") from None
                if not isinstance(data, dict):
                    raise self._protocol(f"malformed reply during {what}")
                return data
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._died(f"process exited during {what}")

    def _died(self, message: str) -> CandidateFailure:
        if self.failure:
            return self.failure
        try:
            code = self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        self._reader.join(timeout=1.0)
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = str(-code)
            message = f"{message} (killed by {sig})"
        elif code is not None:
            message = f"{message} (exit code {code})"
        self.failure = CandidateFailure("crash", message, self.output_tail())
        self._kill_group()
        return self.failure

    def _protocol(self, message: str) -> CandidateFailure:
        self.failure = CandidateFailure("protocol", message, self.output_tail())
        self._kill_group()
        return self.failure

    # -- teardown -----------------------------------------------------------------------------------
    def _kill_group(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            if sig == signal.SIGTERM:
                try:
                    self.proc.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        # Leftover members of the group (grandchildren) get SIGKILL too.
        for pid in _group_pids(self.pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.proc.poll() is None and self.failure is None:
            try:
                self.conn.send_bytes(b'{"op": "exit"}')
                if self.conn.poll(2.0):
                    self.conn.recv_bytes(MAX_MESSAGE_BYTES)
                self.proc.wait(timeout=GRACE_S)
            except (OSError, EOFError, subprocess.TimeoutExpired):
                pass
        self._kill_group()
        try:
            self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self._watch_stop.set()
        self._reader.join(timeout=2.0)
        try:
            self.proc.stdout.close()
        except OSError:
            pass
        self.conn.close()

    def __enter__(self) -> "CandidateProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _child_limits() -> None:  # runs in the child between fork and exec
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def worker_env(device: str, task_size: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the candidate process: the interpreter switch, the size knob, malloc settings
    that keep freed blocks in the heap (so the garbage pre-fill reaches ``torch.empty``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRKERNEL_", "TRITON_INTERPRET"))}
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["DRKERNEL_TASK_SIZE"] = task_size
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
    env["MALLOC_TRIM_THRESHOLD_"] = str(1 << 30)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    if extra:
        env.update(extra)
    return env
