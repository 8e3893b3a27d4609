"""Starting candidate processes by forking a preloaded template (a *zygote*), not by exec.

A candidate process spends most of its start importing torch and triton (~3 CPU-seconds on a
laptop-class core, before any CUDA work). Every candidate still needs a process of its own, but
not its own imports: one zygote per device imports them once (``python -m drkernel.env.process.zygote
FD``, started with exactly the environment a worker gets, so the interpreter switch and the malloc
settings are read at its exec), then forks a child per candidate on request; the child takes the
worker environment of its request (a zygote is replaced when a variable read at start-up,
:data:`START_TIME_VARS`, changes).
The child makes itself a new session (its own process group, like ``start_new_session``), points
stdout/stderr at the grader's output pipe, enters its work directory and runs
:func:`drkernel.env.process.worker.main`; what a worker does after that (the CUDA context, the launch
budget, the hello) is unchanged. Fork costs ~0.1 s instead of ~3 s.

Isolation is unchanged: one candidate per process, discarded after it; the zygote holds nothing
but imported modules (no seed, no reference, no CUDA context: CUDA is first touched in the child,
so the fork is safe). The zygote never runs candidate code: it only forks.

Protocol on the control socket (grader <-> zygote, one zygote per device environment):

* zygote -> grader, once: ``{"ready": pid}`` or ``{"error": "..."}``;
* grader -> zygote: ``{"workdir": path, "env": {...}}`` with two or three file descriptors
  attached (the child's protocol socket, the write end of its output pipe, and its output stage,
  :mod:`drkernel.env.process.staging`); zygote -> grader: ``{"pid": pid}``;
* grader -> zygote: ``{"workdir": path, "env": {...}, "compile": {...}}`` with no descriptor: fork a
  *compiler* for that work directory (:mod:`drkernel.env.process.precompile`: the candidate's Triton kernels
  compiled ahead, in a process that never had a GPU); zygote -> grader: ``{"pid": pid}``;
* zygote -> grader, whenever a child ends: ``{"exit": pid, "status": code}`` (``code`` as
  :attr:`subprocess.Popen.returncode`: negative = killed by that signal).

Messages are single lines of JSON; every request carries an ``id`` that its reply repeats (a late
reply to a request the grader gave up on is dropped, and the child it names killed). The zygote exits when the grader's end of the socket closes. A
candidate can kill its zygote (it is the child's parent); then :class:`ZygoteChild` still sees its
child end (through a pidfd), with an unknown status, and the next start makes a new zygote.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from drkernel.env.process.preload import preload
from drkernel.env.process.proclimits import EXIT_UNKNOWN, child_limits

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
"""The directory holding this drkernel package (what worker_env puts first on PYTHONPATH)."""


# --------------------------------------------------------------------------------------------------
# the zygote process
# --------------------------------------------------------------------------------------------------
def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _enter(env: dict[str, str] | None, ctl: socket.socket, workdir: str, out_fd: int | None) -> None:
    """In a forked child: take the request's environment (see spawn_worker), let go of the
    zygote's control socket and signal handling, stdin from /dev/null, stdout and stderr to
    ``out_fd`` (None: /dev/null too), enter ``workdir``."""
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ctl.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    for fd in (1, 2):
        os.dup2(devnull if out_fd is None else out_fd, fd)
    os.close(devnull)
    if out_fd is not None:
        os.close(out_fd)
    os.chdir(workdir)


def _child(proto_fd: int, out_fd: int, workdir: str, env: dict[str, str] | None, ctl: socket.socket,
           stage_fd: int | None = None) -> None:
    """In the forked child: become a worker. Never returns (``os._exit``)."""
    code = 70
    try:
        os.setsid()
        _enter(env, ctl, workdir, out_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from drkernel.env.process import worker

        code = worker.main([str(proto_fd), workdir] + ([str(stage_fd)] if stage_fd is not None else []))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on the output pipe; the zygote must not continue here
        import traceback

        traceback.print_exc()
        code = 71
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(code)


def _compiler(workdir: str, env: dict[str, str] | None, job: dict[str, Any], ctl: socket.socket,
              zygote: int) -> None:
    """In the forked child: compile the candidate's kernels ahead (drkernel.env.process.precompile). Never
    returns (``os._exit``); nothing it prints reaches the grader."""
    code = 70
    try:
        import ctypes

        os.setpgid(0, 0)  # its own process group (the zygote sets it too): the grader counts and kills by it
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the zygote
        if os.getppid() != zygote:  # the zygote died before that took hold
            os._exit(code)
        _enter(env, ctl, workdir, None)
        from drkernel.env.process.precompile import compile_main

        code = compile_main(workdir, job)
    except BaseException:  # noqa: BLE001 - the zygote must not continue here
        pass
    os._exit(code)


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return -os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else EXIT_UNKNOWN


def _gpu_device_files() -> list[str]:
    """GPU device files this process has open (``/dev/nvidia*``: the CUDA driver was initialised)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("/dev/nvidia", "/dev/dri", "/dev/kfd")):
            found.append(target)
    return found


def serve(fd: int) -> int:
    """The zygote's loop: preload, then fork on request and report children's ends."""
    ctl = socket.socket(fileno=fd)
    try:
        preload()
        if os.environ.get("DRKERNEL_WORKER_DEVICE") == "cpu":
            # the dispatch mode's lazy imports (~2 s), which every CPU worker would pay in its first call
            from drkernel.env.measure.profiling import warm_up

            warm_up()
        touched = _gpu_device_files()
        if touched:  # CUDA was initialised by an import: a forked child could not use it
            raise RuntimeError(f"the preload opened {touched[0]}: CUDA cannot be used after a fork")
    except BaseException as exc:  # noqa: BLE001 - reported to the grader, which falls back to exec
        _send(ctl, {"error": f"{type(exc).__name__}: {exc}"})
        return 3
    _send(ctl, {"ready": os.getpid()})
    compilers: set[int] = set()
    buf, held = b"", []  # one request at a time (the grader awaits each reply): its bytes and descriptors
    while True:
        readable, _, _ = select.select([ctl], [], [], 0.05)
        if readable:
            try:
                chunk, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 3)
            except OSError:
                return 0
            if not chunk:  # the grader is gone; workers notice through their own sockets
                for pid in compilers:  # (PDEATHSIG would end a compiler but not what it started)
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return 0
            buf, held = buf + chunk, held + list(fds)
            if buf.endswith(b"\n"):  # else the rest of the request is still on its way
                try:
                    req = json.loads(buf)
                except ValueError as exc:
                    req = {"workdir": "", "error": f"unreadable request: {exc}"}
                reply = _fork_for(req, held, ctl, compilers)
                for f in held:
                    os.close(f)
                buf, held = b"", []
                _send(ctl, {"id": req.get("id") if isinstance(req, dict) else None, **reply})
        while True:  # reap every child that has ended
            try:
                # a compiler's group is killed before its leader is reaped (its pid, and so its group
                # id, cannot be reused meanwhile): nothing it started outlives it
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # none running
                break
            if info is None:
                break
            if info.si_pid in compilers:
                compilers.discard(info.si_pid)
                try:
                    os.killpg(info.si_pid, signal.SIGKILL)
                except OSError:
                    pass
            pid, raw = os.waitpid(info.si_pid, 0)
            _send(ctl, {"exit": pid, "status": _status(raw)})


def _fork_for(req: dict[str, Any], fds: list[int], ctl: socket.socket, compilers: set[int]) -> dict[str, Any]:
    """Fork the child a request asks for; ``{"pid": pid}`` or ``{"pid": None, "error": ...}``.
    Never raises: a request the zygote cannot serve is answered, the zygote goes on."""
    if not isinstance(req, dict) or not isinstance(req.get("workdir"), str):
        return {"pid": None, "error": "a request is an object with a workdir"}
    if "error" in req:
        return {"pid": None, "error": req["error"]}
    compiler = "compile" in req
    if len(fds) not in ((0,) if compiler else (2, 3)):
        return {"pid": None, "error": f"unexpected number of file descriptors: {len(fds)}"}
    zygote = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"pid": None, "error": f"fork failed: {exc}"}
    if pid == 0:
        if compiler:
            _compiler(req["workdir"], req.get("env"), req["compile"], ctl, zygote)
        _child(fds[0], fds[1], req["workdir"], req.get("env"), ctl, fds[2] if len(fds) == 3 else None)
    if compiler:
        # its own process group before its pid is reported (the child does the same: whichever runs
        # first), so a kill right after the reply already reaches it
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        compilers.add(pid)
    return {"pid": pid}


# --------------------------------------------------------------------------------------------------
# the grader's side
# --------------------------------------------------------------------------------------------------
class ZygoteChild:
    """A forked worker, seen like a :class:`subprocess.Popen` (``pid``, ``stdout``, ``poll``,
    ``wait``, ``returncode``). Its exit status comes from the zygote; if the zygote dies first, the
    child's end is still seen through a pidfd and ``returncode`` is :data:`EXIT_UNKNOWN`."""

    def __init__(self, pid: int, stdout: Any, zygote: "Zygote"):
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._zygote = zygote
        self._ended = threading.Event()
        self._fd_lock = threading.Lock()  # the pidfd: polled from several threads, closed once
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):
            self._pidfd = None

    def _set(self, code: int) -> None:
        with self._fd_lock:
            if self.returncode is None:
                self.returncode = code
            self._ended.set()
            if self._pidfd is not None:
                try:
                    os.close(self._pidfd)
                except OSError:
                    pass
                self._pidfd = None

    def leader_alive(self) -> bool:
        """The process itself has not ended (not even as a zombie): its pid, and a group it leads,
        cannot be another process's."""
        return self.returncode is None and not self._ended_now()

    def _gone_unreported(self) -> bool:
        """The zygote is dead and the child has ended (so no status will ever come)."""
        return not self._zygote.alive and self._ended_now()

    def _ended_now(self) -> bool:
        """The process has ended, as a zombie or gone (its pidfd is readable; without one, /proc)."""
        with self._fd_lock:
            fd = self._pidfd
            if fd is None:
                from drkernel.env.process.procfs import proc_stat

                fields = proc_stat(self.pid)
                return fields is None or fields[0] in ("Z", "X")
            try:
                return bool(select.select([fd], [], [], 0)[0])
            except (OSError, ValueError):
                return True

    def poll(self) -> int | None:
        if self.returncode is None and self._gone_unreported():
            self._set(EXIT_UNKNOWN)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended.wait(0.05):
            if self.poll() is not None:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"zygote child {self.pid}", timeout)
        return self.returncode  # type: ignore[return-value]


class Zygote:
    """One zygote process for one worker environment. Thread-safe; :meth:`spawn` forks a worker."""

    def __init__(self, env: dict[str, str], start_timeout_s: float = 300.0):
        # the zygote gets an exec'd worker's limits (child_limits); its forked children inherit them
        parent, child = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drkernel.env.process.zygote", str(child.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=[child.fileno()], start_new_session=True, env=env, preexec_fn=child_limits,
                cwd=_PACKAGE_ROOT)  # not the caller's directory: ``-m`` imports from there first
        finally:
            child.close()
        self._sock = parent
        self._lock = threading.Lock()  # one spawn request at a time (replies come in order)
        self._rid = 0  # the last request's id (its reply carries it)
        self._abandoned: set[int] = set()  # ids of requests whose reply did not come in time
        self._dropped: set[int] = set()  # pids of children forked for those
        self._replies: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._children: dict[int, ZygoteChild] = {}
        self._early_exits: dict[int, int] = {}
        self._eof = False
        self.pid: int | None = None
        threading.Thread(target=self._read, daemon=True, name="drkernel-zygote").start()
        hello = self._reply(start_timeout_s, "start-up")
        if "ready" not in hello:
            self.close()
            raise RuntimeError(f"zygote failed to start: {hello.get('error', hello)}")
        self.pid = hello["ready"]

    @property
    def alive(self) -> bool:
        return not self._eof and self.proc.poll() is None

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if "exit" in msg:
                    with self._cond:
                        child = self._children.pop(msg["exit"], None)
                        if msg["exit"] in self._dropped:
                            self._dropped.discard(msg["exit"])
                        elif child is None:  # reported before spawn() registered it
                            self._early_exits[msg["exit"]] = msg["status"]
                    if child is not None:
                        child._set(msg["status"])
                elif msg.get("id") is not None and msg["id"] in self._abandoned:
                    self._drop(msg)
                else:
                    with self._cond:
                        self._replies.append(msg)
                        self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _drop(self, msg: dict[str, Any]) -> None:
        """A reply to a request the grader gave up on: kill the child it names at once (it was forked
        just before this reply was sent, and its end is reported only after it)."""
        self._abandoned.discard(msg.get("id"))
        if msg.get("pid"):
            pid = int(msg["pid"])
            with self._cond:
                self._dropped.add(pid)  # its exit report is not a later child's
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def _reply(self, timeout_s: float, what: str, rid: int | None = None) -> dict[str, Any]:
        """The next reply (to request ``rid``: a late reply to an earlier request that timed out is
        dropped, and the child it reports killed)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                while not self._replies:
                    left = deadline - time.monotonic()
                    if self._eof or left <= 0:
                        if rid is not None:  # its reply, should it come, names a child nobody tracks
                            self._abandoned.add(rid)
                        raise RuntimeError(f"zygote gave no reply during {what}"
                                           + (" (it exited)" if self._eof else f" in {timeout_s:.0f}s"))
                    self._cond.wait(min(left, 0.5))
                reply = self._replies.pop(0)
                if rid is None or reply.get("id") == rid:
                    return reply
                if reply.get("id") is not None:  # queued just before its request was given up on
                    self._drop(reply)

    def spawn(self, proto_fd: int, workdir: str, env: dict[str, str] | None = None,
              timeout_s: float = 30.0, stage_fd: int | None = None) -> ZygoteChild:
        """Fork a worker that speaks on ``proto_fd`` (its end of the protocol socket) in ``workdir``,
        with ``env`` as its environment (default: the zygote's) and ``stage_fd`` as its output stage.
        The caller closes its copy of ``proto_fd``. Raises RuntimeError when the zygote is gone."""
        read_end, write_end = os.pipe()
        try:
            pid = self._fork({"workdir": workdir, "env": env},
                             [proto_fd, write_end] + ([stage_fd] if stage_fd is not None else []), timeout_s)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        return self._track(ZygoteChild(pid, os.fdopen(read_end, "rb", buffering=0), self))

    def spawn_compiler(self, workdir: str, job: dict[str, Any], env: dict[str, str] | None = None,
                       timeout_s: float = 30.0) -> ZygoteChild:
        """Fork a compiler (:func:`drkernel.env.process.precompile.compile_main`) for ``workdir``: the leader
        of its own process group (pgid = pid) before the pid is reported, no descriptor of the
        grader's, no output."""
        return self._track(ZygoteChild(self._fork({"workdir": workdir, "env": env, "compile": job}, [], timeout_s),
                                       None, self))

    def _fork(self, msg: dict[str, Any], fds: list[int], timeout_s: float) -> int:
        with self._lock:
            if not self.alive:
                raise RuntimeError("zygote is not running")
            self._rid += 1
            data = json.dumps({**msg, "id": self._rid}).encode() + b"\n"
            try:
                sent = socket.send_fds(self._sock, [data], fds)
                if sent < len(data):  # (descriptors travel with the first part)
                    self._sock.sendall(data[sent:])
            except OSError as exc:
                raise RuntimeError(f"zygote unreachable: {exc}") from exc
            reply = self._reply(timeout_s, "spawn", self._rid)
        if not reply.get("pid"):
            raise RuntimeError(f"zygote could not fork: {reply.get('error', reply)}")
        return int(reply["pid"])

    def _track(self, child: ZygoteChild) -> ZygoteChild:
        with self._cond:
            early = self._early_exits.pop(child.pid, None)
            if early is None:
                self._children[child.pid] = child
        if early is not None:
            child._set(early)
        return child

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: Variables read when a process starts or imports torch/triton/BLAS (the zygote's exec and
#: preload), so a zygote serves only the values it was started with. Every other variable reaches
#: each child as of its own request, like an exec'd worker's environment.
START_TIME_VARS = ("PYTHON", "LD_", "MALLOC_", "GLIBC_", "OMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH_",
                   "TRITON_", "CUDA_", "NVIDIA_", "DRKERNEL_", "PATH")

#: Set in the grader's environment by torch itself (lazily, e.g. the first dispatch mode sets
#: TORCHINDUCTOR_CACHE_DIR) and not read by a worker's start: no reason for a new zygote.
_NOT_AT_START = ("TORCHINDUCTOR_",)

_zygotes: dict[str, tuple[tuple, Zygote]] = {}
_zygotes_lock = threading.Lock()


def _start_fingerprint(env: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(START_TIME_VARS) and not k.startswith(_NOT_AT_START)))


def _serve(env: dict[str, str], fork: Any, replace: bool = True) -> ZygoteChild:
    """``fork(zygote)`` with this process's zygote for ``env``'s device (one per device: started on
    first use; restarted when it died or, with ``replace``, when a start-time variable changed, the
    old one stopped). Raises RuntimeError when no zygote can serve."""
    device = f"{env.get('DRKERNEL_WORKER_DEVICE', 'cpu')}:{env.get('CUDA_VISIBLE_DEVICES', '')}"
    fingerprint = _start_fingerprint(env)
    for attempt in range(2):
        with _zygotes_lock:
            entry = _zygotes.get(device)
            if entry is not None and entry[1].alive and entry[0] != fingerprint and not replace:
                raise RuntimeError("this device's zygote serves another environment now")
            if entry is None or entry[0] != fingerprint or not entry[1].alive:
                if entry is not None:
                    entry[1].close()
                _zygotes[device] = entry = (fingerprint, Zygote(env))
            zygote = entry[1]
        try:
            return fork(zygote)
        except RuntimeError:
            if attempt or zygote.alive:  # replaced by another thread meanwhile: once more, with the new one
                raise
    raise AssertionError("unreachable")


def spawn_worker(env: dict[str, str], proto_fd: int, workdir: str, stage_fd: int | None = None) -> ZygoteChild:
    """Fork a worker with environment ``env`` (:meth:`Zygote.spawn`) from the zygote for its device."""
    return _serve(env, lambda z: z.spawn(proto_fd, workdir, env, stage_fd=stage_fd))


def spawn_compiler(env: dict[str, str], workdir: str, job: dict[str, Any]) -> ZygoteChild:
    """Fork a compiler with environment ``env`` (:meth:`Zygote.spawn_compiler`) from the zygote for
    its device: the same zygote as the worker of ``workdir``, which never opened a GPU (never one
    that replaces a zygote of another environment: its children would go with the old one)."""
    return _serve(env, lambda z: z.spawn_compiler(workdir, job, env), replace=False)


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
