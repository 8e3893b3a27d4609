"""Operating-system confinement of the candidate's process (Linux Landlock), applied in the worker
after its warm start (torch, triton, the CUDA context and the profiler are up) and before the
candidate's module is imported.

What it confines (each only where the kernel supports it; :func:`confine` says what applied):

* **Writes**: only the evaluation's private work directory (its files, Triton's cache for this
  evaluation, temporary files) and the device files the process already uses (``/dev/null``,
  ``/dev/nvidia*``...). Nothing the candidate writes survives the evaluation: the directory is
  deleted with the process.
* **Reads and execution**: the Python installation, the installed libraries, the drkernel package
  (not the repository around it: no bundled solutions), system directories (``/usr``, ``/lib``,
  ``/etc``, ``/proc``, ``/sys``, ``/opt``), Triton's shared compilation cache, the work directory.
  Other evaluations' directories, the grader's state and the user's home are out of reach.
* **Network**: TCP bind and connect are refused (Landlock ABI >= 4).
* **Signals and abstract UNIX sockets** outside the process (ABI >= 6): the candidate cannot signal
  the grader, the zygote or other workers.
* **The process group**: ``setsid`` and ``setpgid`` are refused by a seccomp filter on every thread
  (:mod:`drkernel.env.process.seccomp`), so the process and everything it starts stay in the group whose
  memory the grader counts and which it kills at the end (where seccomp applies, with or without
  Landlock).

The process also gets ``TMPDIR``, ``HOME`` and the CUDA JIT cache pointed into the work directory,
and ``PR_SET_NO_NEW_PRIVS``. Landlock confines the calling thread and the threads and processes
it starts afterwards (threads that existed before, such as the CUDA driver's, are native code the
candidate cannot run Python in). Where Landlock is unavailable (older kernels, some sandboxes) the
result says so and the audit hook (:mod:`drkernel.env.guards.audit`) still refuses the same operations
when the candidate makes them.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import sysconfig
from typing import Any

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # x86_64 and aarch64 alike
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem access rights, by ABI version
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_V1 = (1 << 13) - 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = READ_FILE | READ_DIR | EXECUTE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: not available)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        v = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
        return max(int(v), 0)
    except (OSError, AttributeError):
        return 0


def read_roots(extra: list[str] | None = None) -> list[str]:
    """Directories the candidate's process may read and execute from."""
    roots = {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt", "/run"}
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts", "include"):
        p = sysconfig.get_path(key)
        if p:
            roots.add(p)
    roots.update({sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))})
    for entry in sys.path:  # site-packages and .pth directories; never the repository root
        if entry and ("site-packages" in entry or "dist-packages" in entry or entry.startswith(sys.base_prefix)):
            roots.add(entry)
    for mod in ("torch", "triton", "numpy", "drkernel"):
        m = sys.modules.get(mod)
        f = getattr(m, "__file__", None)
        if f:
            roots.add(os.path.dirname(os.path.realpath(f)))
    roots.update(extra or [])
    return sorted({os.path.realpath(r) for r in roots if r and os.path.exists(r)})


_HARMLESS_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


def _device_files() -> list[str]:
    """Character devices the process may keep using (GPU, /dev/null, random)."""
    out = []
    for base in ("/dev", "/dev/nvidia-caps", "/dev/dri"):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for n in names:
            p = os.path.join(base, n)
            try:
                if stat.S_ISCHR(os.stat(p).st_mode):
                    out.append(p)
            except OSError:
                continue
    return out


def confine(workdir: str, extra_read: list[str] | None = None, devices: bool = True,
            writable: list[str] | None = None) -> dict[str, Any]:
    """Confine this process (see the module doc); returns what applied, for ``details["isolation"]``.
    ``devices=False``: of the character devices only /dev/null, /dev/zero and the random devices stay
    open to it (no GPU: :mod:`drkernel.env.process.precompile`). ``writable``: only these directories under
    the work directory may be written, the rest of it only read (the compiler's case: the file the
    worker imports stays the grader's). A confined process may confine itself again (Landlock
    layers stack: each can only take rights away).

    Never raises: a kernel without Landlock gives ``{"landlock": 0, ...}``."""
    from drkernel.env.process.seccomp import fix_process_group

    report = _landlock(workdir, extra_read, devices, writable)
    why_not = fix_process_group()
    report["process_group"] = why_not or "fixed (setsid, setpgid refused; no new sockets, no io_uring)"
    return report


def _landlock(workdir: str, extra_read: list[str] | None, devices: bool,
              writable: list[str] | None) -> dict[str, Any]:
    report: dict[str, Any] = {"landlock": 0, "writes": "unrestricted", "reads": "unrestricted", "network": "open",
                              "signals": "open"}
    abi = landlock_abi()
    report["landlock"] = abi
    if abi <= 0:
        report["reason"] = "Landlock is not available in this kernel"
        return report
    fs = _FS_V1 | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        report["reason"] = f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
        return report
    problems: list[str] = []

    def allow(path: str, access: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
            return
        try:
            if not os.path.isdir(path):
                access &= READ_FILE | WRITE_FILE | EXECUTE | TRUNCATE | IOCTL_DEV
            rule = _PathBeneath(access & fs, pfd)
            if libc.syscall(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                problems.append(f"{path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(pfd)

    try:
        for root in read_roots(extra_read):
            allow(root, READ)
        # (a process confined already cannot list /dev: the harmless devices are named, not found)
        for dev in _device_files() if devices else [d for d in _HARMLESS_DEVICES if os.path.exists(d)]:
            allow(dev, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV)
        if writable is None:
            allow(os.path.realpath(workdir), fs)
        else:
            allow(os.path.realpath(workdir), READ)
            for d in writable:
                allow(os.path.realpath(d), fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            report["reason"] = f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
            return report
        if libc.syscall(_SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            report["reason"] = f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
            return report
    finally:
        os.close(fd)
    report.update(writes="work directory only" if writable is None else "named parts of the work directory only",
                  reads="libraries, system directories, work directory",
                  network="TCP refused" if net else "open (Landlock ABI < 4)",
                  signals="own process only" if scoped else "open (Landlock ABI < 6)")
    if problems:
        report["rule_problems"] = problems[:8]
    return report


def private_environment(workdir: str) -> dict[str, str]:
    """Environment variables that keep the candidate's files in its work directory."""
    tmp = os.path.join(workdir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    return {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp, "HOME": workdir,
            "CUDA_CACHE_PATH": os.path.join(workdir, "cuda-cache"),
            "TRITON_CACHE_DIR": os.path.join(workdir, "triton-cache"),
            "TRITON_CACHE_MANAGER": "drkernel.env.process.triton_cache:LayeredCacheManager"}


def enter_private_environment(workdir: str) -> str | None:
    """Point this process at its work directory, as a worker and its compiler both must (the same
    Triton cache, so the compiler's kernels are the worker's cache hits): the variables of
    :func:`private_environment`, Triton's shared cache layer (the cache directory as configured
    before, read-only; returned), the temporary directory. Before :func:`confine`."""
    import tempfile

    try:
        import triton

        shared = triton.knobs.cache.dir
    except Exception:  # noqa: BLE001 - an older Triton: no shared layer
        shared = None
    from drkernel.env.process.triton_cache import SHARED_ENV

    env = private_environment(workdir)
    if shared:
        env[SHARED_ENV] = shared
    os.environ.update(env)
    tempfile.tempdir = env["TMPDIR"]  # it may have been computed (as /tmp) before
    os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
    return shared


__all__ = ["confine", "landlock_abi", "read_roots", "private_environment", "enter_private_environment"]
