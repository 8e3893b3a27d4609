"""The candidate's process, seen from the grader.

Every candidate runs in a fresh process of its own (forked from a preloaded zygote,
:mod:`drkernel.env.process.zygote`, or ``python -m drkernel.env.process.worker``) in its own process group. The
grader enforces, from outside:

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

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from drkernel.env.process.procfs import _group_pids, _rss_bytes, cpu_seconds, kill_group, thread_run_ns
from drkernel.env.process.proclimits import EXIT_UNKNOWN, child_limits
from drkernel.env.result import EnvironmentFailure
from drkernel.env.guards.seal import EXIT_TAMPERED

MAX_MESSAGE_BYTES = 8 << 20
TAIL_BYTES = 64 << 10
GRACE_S = 2.0


class CandidateFailure(Exception):
    """The candidate's process crashed, hung, flooded output or ran out of memory."""

    def __init__(self, kind: str, message: str, output_tail: str = ""):
        super().__init__(message)
        self.kind = kind  # "timeout" | "crash" | "flood" | "memory" | "protocol" | "forged" | "cancelled"
        self.message = message
        self.output_tail = output_tail


class CandidateProcess:
    """One candidate process. Use as a context manager; :meth:`close` always kills the group.

    ``device`` is ``cpu`` or ``cuda:N``: a CUDA worker sees only GPU ``N`` (``CUDA_VISIBLE_DEVICES``
    narrowed; inside, it is ``cuda:0``). The process starts on construction; :meth:`wait_ready`
    waits for its hello (torch, triton and the CUDA context are up). The limits can be set after
    start (a warm spare is started before its candidate's limits are known).

    ``start``: ``zygote`` forks the process from a preloaded template of this device's worker
    environment (:mod:`drkernel.env.process.zygote`: ~0.1 s instead of ~3 CPU-seconds of imports), ``exec``
    runs ``python -m drkernel.env.process.worker``; default :func:`start_method_default`. A zygote that
    cannot start falls back to exec.
    """

    def __init__(self, device: str = "cpu", memory_limit_mb: int = 16384, output_limit_bytes: int = 4 << 20,
                 workdir_root: str | None = None, start: str | None = None):
        import tempfile

        if start is not None and start not in START_METHODS:
            raise ValueError(f"start must be one of {START_METHODS}, got {start!r}")
        self.start_method = start or start_method_default()  # before anything is created
        self.env = env = worker_env(device)
        self.device = device
        self.workdir = Path(tempfile.mkdtemp(prefix="drkernel-", dir=workdir_root or workdir_root_default()))
        self.memory_limit = memory_limit_mb << 20
        self.output_limit = output_limit_bytes
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.output_bytes = 0
        self.failure: CandidateFailure | None = None
        self.hello: Any = None
        self.started_at = time.monotonic()
        self.start_s: float | None = None
        self._closed = False
        self.compiler: Any = None  # drkernel.env.process.precompile.Compiler, once started
        from drkernel.env.process.staging import Stage

        try:
            self.stage = Stage.create()  # the shared output stage (drkernel.env.process.staging), sized at load
            parent_sock, child_sock = socket.socketpair()
        except OSError as exc:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if getattr(self, "stage", None) is not None:
                self.stage.close()
            raise EnvironmentFailure(f"cannot start the candidate process: {exc}") from exc
        try:
            self.proc = None
            if self.start_method == "zygote":
                from drkernel.env.process.zygote import spawn_worker

                try:
                    self.proc = spawn_worker(env, child_sock.fileno(), str(self.workdir), self.stage.fd)
                except RuntimeError as exc:  # no zygote here, or it failed to start: exec instead
                    _warn_fallback(exc)
                    self.start_method = "exec"
            if self.proc is None:
                cmd = [sys.executable, "-m", "drkernel.env.process.worker", str(child_sock.fileno()), str(self.workdir),
                       str(self.stage.fd)]
                self.proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    pass_fds=[child_sock.fileno(), self.stage.fd], start_new_session=True, env=env,
                    cwd=str(self.workdir), preexec_fn=child_limits,
                )
        except OSError as exc:
            shutil.rmtree(self.workdir, ignore_errors=True)
            parent_sock.close()
            self.stage.close()
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

    def wait_ready(self, timeout_s: float = 120.0) -> "CandidateProcess":
        """Wait for the worker's hello; EnvironmentFailure when it does not come (not the candidate's
        fault: no candidate code has run yet)."""
        if self.hello is not None:
            return self
        from drkernel.env.protocol import ProtocolError, parse_reply

        try:
            raw = self._recv_raw(timeout_s, what="start-up")
            reply = parse_reply(raw, "hello")
        except (CandidateFailure, ProtocolError) as exc:
            self.close()
            msg = getattr(exc, "message", str(exc))
            raise EnvironmentFailure(f"the evaluation worker did not start: {msg}\n{self.output_tail()}") from exc
        if not reply.ok:
            self.close()
            raise EnvironmentFailure(f"the evaluation worker failed to start: {reply.body.error}")
        self.hello = reply.body
        self.start_s = time.monotonic() - self.started_at
        return self

    def start_compiler(self, job: dict[str, Any]) -> Any:
        """A compiler for this worker's directory (:class:`drkernel.env.process.precompile.Compiler`), forked
        from the zygote this worker came from, its memory counted with the worker's from now on and
        killed at :meth:`close` at the latest; None for a worker started by exec (no zygote to fork
        from). Raises RuntimeError when the zygote cannot fork one."""
        if self.start_method != "zygote":
            return None
        from drkernel.env.process.precompile import Compiler
        from drkernel.env.process.zygote import spawn_compiler

        if not self.alive:  # no memory watcher would count it
            return None
        self.compiler = Compiler(spawn_compiler(self.env, str(self.workdir), job), str(self.workdir))
        if not self.alive:  # the worker ended meanwhile (its watcher may have missed the compiler)
            self.compiler.kill("its worker ended")
        return self.compiler

    def cpu_seconds(self) -> tuple[float, float] | None:
        """``(process, main thread)`` CPU seconds so far (:func:`cpu_seconds`); None when gone."""
        return cpu_seconds(self.proc.pid) if self.proc is not None else None

    def thread_run_ns(self) -> dict[int, int]:
        """Nanoseconds on a CPU of each live thread (:func:`thread_run_ns`), by thread id."""
        return thread_run_ns(self.proc.pid) if self.proc is not None else {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def set_limits(self, memory_limit_mb: int, output_limit_bytes: int) -> None:
        self.memory_limit = memory_limit_mb << 20
        self.output_limit = output_limit_bytes
        if self.output_bytes > self.output_limit and self.failure is None:
            self.failure = CandidateFailure("flood", f"output flood: more than {self.output_limit} bytes "
                                            "written to stdout/stderr")
            self._kill_group()

    @property
    def alive(self) -> bool:
        return not self._closed and self.failure is None and self.proc.poll() is None

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
        # scanning all of /proc, so that list is refreshed once a second. The compiler's group counts
        # with the worker's (drkernel.env.process.precompile).
        try:
            self._watch_loop()
        finally:  # from here on nobody counts the compiler's memory: it goes too
            if self.compiler is not None:
                self.compiler.kill("its worker ended")

    def _watch_loop(self) -> None:
        others: list[int] = []
        polls = 0
        while not self._watch_stop.wait(0.05):
            if self.proc.poll() is not None:
                return
            if polls % 20 == 0:
                others = [p for p in _group_pids(self.pgid, max_age_s=0.5) if p != self.proc.pid]
            polls += 1
            rss = _rss_bytes(self.proc.pid) + sum(_rss_bytes(p) for p in others)
            compiler = self.compiler
            extra = compiler.pss_bytes() if compiler is not None else 0
            # the stage's page-locked pages are resident in the worker too: not the candidate's
            if rss + extra > self.memory_limit + self.stage.registered and extra:
                # the compiler only saves time: it goes first, the worker's verdict is untouched
                compiler.kill(f"memory limit: {(rss + extra) >> 20} MiB resident with the worker's "
                              f"(limit {self.memory_limit >> 20} MiB)")
            elif rss > self.memory_limit + self.stage.registered and self.failure is None:
                self.failure = CandidateFailure("memory", f"memory limit exceeded: {rss >> 20} MiB resident "
                                                f"(limit {self.memory_limit >> 20} MiB)")
                self._kill_group()
                return

    def output_tail(self, limit: int = 4000) -> str:
        text = b"".join(self._tail).decode("utf-8", errors="replace")
        return text[-limit:]

    # -- messaging ----------------------------------------------------------------------------------
    def request(self, req: Any, timeout_s: float, on_spot: Any = None) -> Any:
        """Send a protocol request, return its parsed :class:`~drkernel.env.protocol.Reply`. A hang,
        crash, flood, memory overrun or malformed reply raises :class:`CandidateFailure`.

        ``on_spot(call) -> (seed, size) | None`` answers the worker's questions during a timing
        request (keep the output of timed call ``call``? None: no; else yes, and which elements,
        :mod:`drkernel.env.measure.spot`); a question without ``on_spot``, or a malformed one, is a
        protocol violation."""
        import json
        import secrets

        from drkernel.env.protocol import ForgedMessage, ProtocolError, encode_request, is_spot_query, parse_reply
        from drkernel.env.measure.spot import encode_keep

        if self.failure:
            raise self.failure
        nonce = secrets.token_hex(16)
        try:
            self.conn.send_bytes(encode_request(req, nonce))
        except (OSError, ValueError) as exc:
            raise self._died(f"could not send request: {exc}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            raw = self._recv_raw(max(deadline - time.monotonic(), 0.001), what=req.op)
            if raw[:1] == b"{" and b'"spot"' in raw[:40]:
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
                if is_spot_query(data):
                    if data.get("nonce") != nonce:
                        raise self._violation("forged", f"a spot question without the request's nonce during {req.op}")
                    call = data.get("call")
                    if on_spot is None or not isinstance(call, int) or isinstance(call, bool):
                        raise self._violation("protocol", f"unexpected question during {req.op}: {raw[:80]!r}")
                    try:
                        plan = on_spot(call)
                        self.conn.send_bytes(b"0" if plan is None else encode_keep(*plan))
                    except (OSError, ValueError) as exc:
                        raise self._died(f"could not answer during {req.op}: {exc}") from None
                    continue
            try:
                return parse_reply(raw, req.op, nonce)
            except ForgedMessage as exc:
                raise self._violation("forged", f"{exc} during {req.op}") from None
            except ProtocolError as exc:
                raise self._violation("protocol", f"malformed reply during {req.op}: {exc}") from None

    def _recv_raw(self, timeout_s: float, what: str) -> bytes:
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
                    return self.conn.recv_bytes(MAX_MESSAGE_BYTES)
                except (EOFError, OSError):
                    raise self._died(f"process exited during {what}") from None
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._died(f"process exited during {what}")

    def kill(self, reason: str = "cancelled") -> None:
        """End the candidate now (cancellation from another thread): the group is killed and the
        request in flight raises :class:`CandidateFailure` of kind ``cancelled``."""
        if self.failure is None:
            self.failure = CandidateFailure("cancelled", reason)
        self._kill_group()

    def _died(self, message: str) -> CandidateFailure:
        if self.failure:
            return self.failure
        try:
            code = self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        self._reader.join(timeout=1.0)
        if code == EXIT_TAMPERED:  # the worker's seal found the harness's namespaces changed (drkernel.env.guards.seal)
            tail = self.output_tail()
            detail = next((line for line in tail.splitlines() if "harness tampered" in line), "")
            self.failure = CandidateFailure("forged", f"{message}: the candidate's code changed the harness's own "
                                                      f"code or state ({detail.strip()[:300]})", tail)
            self._kill_group()
            return self.failure
        if code is not None and code != EXIT_UNKNOWN:
            if code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = str(-code)
                message = f"{message} (killed by {sig})"
            else:
                message = f"{message} (exit code {code})"
        self.failure = CandidateFailure("crash", message, self.output_tail())
        self._kill_group()
        return self.failure

    def _violation(self, kind: str, message: str) -> CandidateFailure:
        """The channel broke its protocol (``protocol``), or carried a message the harness did not
        write (``forged``: the candidate's code wrote it): the process is ended."""
        self.failure = CandidateFailure(kind, message, self.output_tail())
        self._kill_group()
        return self.failure

    # -- teardown -----------------------------------------------------------------------------------
    def _kill_group(self) -> None:
        if not (self._closed and self.failure is None):  # a failure: SIGTERM first, a grace period
            try:
                os.killpg(self.pgid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        kill_group(self.pgid)  # the group, and leftover members (grandchildren) a scan finds

    def close(self) -> None:
        """Kill the process group, then wait for it to end and free what it used (:meth:`terminate`,
        :meth:`reap`)."""
        if self.terminate():
            self.reap()

    def terminate(self) -> bool:
        """The part of :meth:`close` a verdict may depend on: after it, nothing of the candidate runs
        any more code (its compiler and its group are killed; a failed process gets SIGTERM and a
        grace period first). True the first time (then :meth:`reap` must follow). Not
        :meth:`kill`, which cancels a request in flight and leaves the closing to :meth:`close`."""
        if self._closed:
            return False
        self._closed = True
        if self.compiler is not None:
            self.compiler.kill()
        # The process is discarded after its one candidate: no graceful exit to wait for.
        self._kill_group()
        return True

    def reap(self) -> None:
        """The rest of :meth:`close`, after :meth:`terminate`: wait for the process to end (a CUDA context
        takes 0.1-0.3 s to tear down), stop the threads reading it, unmap its stage and remove its
        directory. Nothing here changes a verdict: a grader may run it off the evaluation's path
        (:meth:`WarmPool.discard`). Each step runs even if an earlier one fails (the first error is
        raised at the end)."""
        error: BaseException | None = None

        def step(fn: Callable[[], Any]) -> None:
            nonlocal error
            try:
                fn()
            except subprocess.TimeoutExpired:
                pass
            except Exception as exc:  # noqa: BLE001 - the other steps still run; raised below
                error = error or exc

        step(lambda: self.proc.wait(timeout=GRACE_S))
        self._watch_stop.set()
        step(lambda: self._reader.join(timeout=2.0))
        step(self.proc.stdout.close)
        step(self.conn.close)
        step(self.stage.close)  # after the process is gone: nothing writes into it any more
        shutil.rmtree(self.workdir, ignore_errors=True)
        if error is not None:
            raise error

    def __enter__(self) -> "CandidateProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


ProcessSource = Callable[[str, float], CandidateProcess]
"""``acquire(device, timeout_s)``: where an evaluation gets its processes (a warm pool, or :func:`fresh_process`)."""


def fresh_process(device: str, timeout_s: float) -> CandidateProcess:
    """A newly started candidate process (no warm pool)."""
    proc = CandidateProcess(device)
    proc.warm = False  # type: ignore[attr-defined]
    return proc.wait_ready(timeout_s)


def close_process(proc: CandidateProcess) -> None:
    proc.close()


_SHM_MIN_FREE = 4 << 30
START_METHODS = ("zygote", "exec")


_fallback_warned = False


def _warn_fallback(exc: BaseException) -> None:
    global _fallback_warned
    if not _fallback_warned:
        _fallback_warned = True
        import logging

        logging.getLogger("drkernel.env").warning("candidate processes start by exec (slower): %s", exc)


def start_method_default() -> str:
    """How candidate processes start: ``DRKERNEL_WORKER_START`` (``zygote`` or ``exec``), else
    ``zygote``."""
    method = os.environ.get("DRKERNEL_WORKER_START", "zygote")
    if method not in START_METHODS:
        raise EnvironmentFailure(f"DRKERNEL_WORKER_START must be one of {START_METHODS}, got {method!r}")
    return method


def workdir_root_default() -> str | None:
    """Candidate outputs come back as files: put them on /dev/shm (memory) when it is writable and
    roomy. Containers often mount a 64 MiB /dev/shm, too small for full-size tasks, so below 4 GiB
    free the default temporary directory is used instead."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    roomy = st.f_bavail * st.f_frsize >= _SHM_MIN_FREE
    return "/dev/shm" if roomy and os.access("/dev/shm", os.W_OK) else None


def _physical_gpu(index: int) -> str:
    """The parent's view of GPU ``index`` as a ``CUDA_VISIBLE_DEVICES`` entry."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(index)
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    if index >= len(entries):
        raise EnvironmentFailure(f"cuda:{index} is not visible (CUDA_VISIBLE_DEVICES={visible!r})")
    return entries[index]


def worker_cuda_connections() -> int | None:
    """``DRKERNEL_WORKER_CUDA_CONNECTIONS`` (1-32; unset or empty: CUDA's default of 8): the
    ``CUDA_DEVICE_MAX_CONNECTIONS`` of a GPU worker. Raises EnvironmentFailure naming the variable
    for any other value."""
    raw = os.environ.get("DRKERNEL_WORKER_CUDA_CONNECTIONS", "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 32:
        raise EnvironmentFailure(f"DRKERNEL_WORKER_CUDA_CONNECTIONS must be an integer from 1 to 32 "
                                 f"(CUDA_DEVICE_MAX_CONNECTIONS), got {raw!r}")
    return value


def worker_env(device: str) -> dict[str, str]:
    """Environment of the candidate process: the interpreter switch on CPU, only its GPU visible on
    CUDA, malloc settings that keep freed blocks in the heap (so the garbage pre-fill reaches
    ``torch.empty``). Built once per process start, never by changing this process's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRKERNEL_", "TRITON_INTERPRET"))}
    pkg_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    # ``python -m`` puts the working directory first on sys.path, before PYTHONPATH: a zygote started
    # from a directory holding another drkernel (an older checkout, say) ran that one's worker under
    # this grader. Python >= 3.11 leaves it out; the zygote also starts in the package's root.
    env["PYTHONSAFEPATH"] = "1"
    # One thread of work: torch runs with one intra-op thread (process/harness.py), and the BLAS under NumPy
    # (the interpreter's tl.dot) with one, so any CPU time on another thread is the candidate's
    # (evaluation's other-threads check).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
    env["MALLOC_TRIM_THRESHOLD_"] = str(1 << 30)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["DRKERNEL_WORKER_DEVICE"] = "cpu"
    else:
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        env["CUDA_VISIBLE_DEVICES"] = _physical_gpu(index)
        env["DRKERNEL_WORKER_DEVICE"] = "cuda"
        # Opt-in: fewer hardware work queues per candidate context. Creating and tearing down a
        # CUDA context serialises across the whole host (~3.5 a second on a 4 x H200 host, whichever
        # GPU), which caps one-process-per-candidate grading; with 1 queue a context is made 23-39 %
        # faster and torn down 2.5-3x faster (tests/benchmarks/diagnostics/context_churn.py), at the cost of
        # a candidate's streams sharing one queue. Only the workers get it (not the trainer's processes).
        # (A CUDA_DEVICE_MAX_CONNECTIONS of the grader's own, e.g. verl's for Megatron, is not the
        # candidates': they get CUDA's default unless the knob says otherwise.)
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        conns = worker_cuda_connections()
        if conns is not None:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(conns)
    return env


class WarmPool:
    """Spare candidate processes, started ahead of time, per device.

    The task-independent start of a worker (importing torch and triton, creating the CUDA context:
    ~2 s on CPU, ~4.5 s on an H100) happens here, off the evaluation's path. Each process still
    serves exactly one candidate and is discarded after it (:meth:`acquire` hands it over; the
    caller closes it); a replacement starts at once in the background. ``spares`` per device are
    kept ready. Thread-safe.

    When a burst of evaluations outruns the ready spares, a caller waits for a spare already starting
    (the earliest to finish) rather than starting one more process beside it; only callers beyond the
    starts in progress start their own. Creating a CUDA context serialises across the host (~0.24 s
    each; 48 at once take 11.4 s each on a 4-GPU H200 host: ``docs/results/h200x4-2026-11-28b.md``), so
    every extra start in a burst delays all the others.
    """

    def __init__(self, spares: int = 1, workdir_root: str | None = None, start_timeout_s: float = 300.0):
        from concurrent.futures import ThreadPoolExecutor

        self._reaper = ThreadPoolExecutor(max_workers=2, thread_name_prefix="drkernel-reap")
        self._reaping: set[Any] = set()
        self.spares = max(0, int(spares))
        self.workdir_root = workdir_root
        self.start_timeout_s = start_timeout_s
        self._ready: dict[str, deque[CandidateProcess]] = {}
        self._starting: dict[str, int] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a spare became ready, failed, or the pool closed
        self._waiting: dict[str, int] = {}
        self._closed = False
        self.started = 0
        self.start_failures = 0
        self.fresh_starts = 0
        """Processes started for a caller: no spare was ready and none starting for it, or the one it
        waited for took longer than :meth:`_wait_cap_s`."""
        self.starts: deque[dict[str, float]] = deque(maxlen=256)
        """The latest spares' start seconds (``total``) and the worker's own parts (``Hello.start_parts``)."""

    def prewarm(self, device: str) -> None:
        """Start spares for ``device`` now (they are also started on first use)."""
        self._refill(device)

    def acquire(self, device: str, timeout_s: float = 120.0) -> CandidateProcess:
        """A ready process for ``device``: a warm spare when one is ready; else the next spare to finish
        starting, when more are starting than callers wait for them; else a fresh start. The wait is
        capped (:meth:`_wait_cap_s`) so that a hung spare start cannot hold callers for its whole start
        timeout; the fresh start then has ``timeout_s``. ``proc.warm`` is True only for a spare that was
        ready (the caller did not wait)."""
        proc, waited = None, False
        with self._lock:
            wait_until = time.monotonic() + min(timeout_s, self._wait_cap_s())
            self._waiting[device] = self._waiting.get(device, 0) + 1
            try:
                while True:
                    if self._closed:
                        raise RuntimeError("WarmPool is closed")
                    q = self._ready.setdefault(device, deque())
                    while q and proc is None:
                        cand = q.popleft()
                        if cand.alive:
                            proc = cand
                        else:
                            cand.close()
                    left = wait_until - time.monotonic()
                    # starts in progress, each promised to one waiting caller (whoever takes the lock
                    # first when one is ready: not strictly in arrival order)
                    if proc is not None or self._starting.get(device, 0) < self._waiting[device] or left <= 0:
                        break
                    waited = True
                    self._changed.wait(left)
            finally:
                self._waiting[device] -= 1
        self._refill(device)
        if proc is None:
            with self._lock:
                self.fresh_starts += 1
            proc = CandidateProcess(device, workdir_root=self.workdir_root).wait_ready(timeout_s)
            proc.warm = False  # type: ignore[attr-defined]
        else:
            proc.warm = not waited  # type: ignore[attr-defined]
        return proc

    def _wait_cap_s(self) -> float:
        """How long a caller waits for a spare in progress: three times the slowest recent start, at
        least 15 s (60 s before any start is recorded). Called with the lock held."""
        if not self.starts:
            return 60.0
        return max(15.0, 3.0 * max(s["total"] for s in self.starts))

    def _refill(self, device: str) -> None:
        with self._lock:
            if self._closed:
                return
            missing = self.spares - len(self._ready.get(device, ())) - self._starting.get(device, 0)
            self._starting[device] = self._starting.get(device, 0) + max(0, missing)
        for i in range(max(0, missing)):
            try:
                threading.Thread(target=self._start_one, args=(device,), daemon=True,
                                 name=f"drkernel-warm-{device}").start()
            except BaseException:  # (no thread: the starts counted for it will not happen; say so to waiters)
                with self._lock:
                    self._starting[device] -= missing - i
                    self._changed.notify_all()
                raise

    def _start_one(self, device: str) -> None:
        proc = None
        try:
            proc = CandidateProcess(device, workdir_root=self.workdir_root).wait_ready(self.start_timeout_s)
        except Exception:  # noqa: BLE001 - a spare that fails to start is replaced by a fresh start later
            with self._lock:
                self.start_failures += 1
        with self._lock:
            self._starting[device] -= 1
            self._changed.notify_all()
            if proc is not None:
                self.started += 1
                parts = getattr(proc.hello, "start_parts", None) or {}
                self.starts.append({"total": float(proc.start_s or 0.0), **{k: float(v) for k, v in parts.items()}})
                if self._closed:
                    closing = proc
                else:
                    self._ready.setdefault(device, deque()).append(proc)
                    closing = None
            else:
                closing = None
        if closing is not None:
            closing.close()

    def discard(self, proc: CandidateProcess) -> None:
        """Close a process an evaluation is done with: killed now (:meth:`CandidateProcess.terminate`),
        reaped in the background (:meth:`CandidateProcess.reap`), so neither the evaluation's result
        nor its slot waits while the process's CUDA context is torn down (0.27 s per evaluation at
        capacity 8 on an H100). :meth:`close` waits for every reap."""
        if not proc.terminate():
            return
        try:
            fut = self._reaper.submit(proc.reap)
        except RuntimeError:  # the pool is closed: reap here
            proc.reap()
            return
        with self._lock:
            self._reaping.add(fut)
        fut.add_done_callback(self._reaped)

    def _reaped(self, fut: Any) -> None:
        with self._lock:
            self._reaping.discard(fut)
        exc = fut.exception()
        if exc is not None:  # (nobody waits for this future: say so, or nobody would know)
            import logging

            logging.getLogger("drkernel.env").warning("reaping a candidate process failed: %r", exc)

    @property
    def reaping(self) -> int:
        """Discarded processes not yet reaped."""
        with self._lock:
            return len(self._reaping)

    def ready_count(self, device: str) -> int:
        with self._lock:
            return sum(p.alive for p in self._ready.get(device, ()))

    @property
    def ready_total(self) -> int:
        """Spare processes ready now, over every device."""
        with self._lock:
            return sum(p.alive for q in self._ready.values() for p in q)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._changed.notify_all()
            procs = [p for q in self._ready.values() for p in q]
            self._ready.clear()
        for p in procs:
            p.close()
        self._reaper.shutdown(wait=True)  # every discarded process ended, its directory removed
