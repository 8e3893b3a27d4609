"""Keeping a candidate's processes in the process group the grader watches, and off other
processes' sockets (seccomp).

The grader accounts a candidate's memory over its *process group*, and ends it by signalling that
group (:mod:`drkernel.env.process.sandbox`, :mod:`drkernel.env.process.precompile`). A process that calls
``setsid`` or ``setpgid`` leaves the group: from then on its memory is not counted and nothing kills
it at the end of the evaluation. The audit refuses ``os.setsid`` from the candidate's Python frames,
but native code (a library calling on its behalf, a C extension) is not audited.

:func:`fix_process_group` installs a seccomp filter on every thread of the calling process
(``SECCOMP_FILTER_FLAG_TSYNC``) under which ``setsid`` and ``setpgid`` fail with ``EPERM``, whoever
calls them. So do ``socket`` and ``io_uring_setup``: Landlock does not govern ``connect()`` to a
pathname UNIX socket, so a new UNIX socket could reach a service listening on one (a D-Bus or
systemd user manager, which can start processes outside the group), nor UDP, nor TCP below its
ABI 4; a process confined here talks to the grader over the socket pair it inherited and never
needs a new socket, and io_uring could open sockets past the filter. ``socketpair`` stays allowed
for the connected kinds only (stream, seqpacket: the pair reaches nobody else): one end of a
datagram pair can ``sendto`` any pathname datagram socket (journald's ``/dev/log``, a systemd
notify socket), and Landlock does not govern that either.
Filters are inherited by every child, survive ``exec`` and cannot be removed, so the process and all
its descendants stay in the group it is in now. System calls of another ABI than the process's own
(x86's 32-bit ``int 0x80``, x32) are refused the same way: they are a second path to the same
calls. Everything else is allowed. Needs ``PR_SET_NO_NEW_PRIVS`` (set by
:func:`drkernel.env.process.confine.confine`) or ``CAP_SYS_ADMIN``. Installed when the process is confined:
in a worker, after its CUDA context, its profiler and the launch budget are set up, right before
the candidate's code is imported.

The filter, as classic BPF over ``struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}``::

    ld  arch            ; jne AUDIT_ARCH_<own> -> deny
    ld  nr              ; jge 0x40000000 -> deny       (x86-64 only: the x32 ABI's numbers)
    jeq __NR_setsid -> deny ; jeq __NR_setpgid -> deny
    jeq __NR_socket -> deny ; jeq __NR_io_uring_setup -> deny
    jne __NR_socketpair -> allow
    ld  args[1] (low word) ; and 0xf ; jeq SOCK_STREAM -> allow ; jeq SOCK_SEQPACKET -> allow ; -> deny
    allow: ret ALLOW
    deny: ret ERRNO(EPERM)
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import Any

# machine -> (AUDIT_ARCH_*, __NR_seccomp, __NR_setsid, __NR_setpgid, x32 bit or 0, __NR_socket,
#             __NR_io_uring_setup, __NR_socketpair)
_ABIS = {
    "x86_64": (0xC000003E, 317, 112, 109, 0x40000000, 41, 425, 53),
    "aarch64": (0xC00000B7, 277, 157, 154, 0, 198, 425, 199),
}
_SOCK_STREAM, _SOCK_SEQPACKET, _SOCK_TYPE_MASK = 1, 5, 0xF
_ARG1_LOW = 16 + 8 * 1  # offsetof(seccomp_data, args[1]), its low 32 bits (both ABIs are little-endian)

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K, _ALU_AND_K = 0x20, 0x15, 0x35, 0x06, 0x54
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_SET_MODE_FILTER, _FLAG_TSYNC = 1, 1
_PR_SET_NO_NEW_PRIVS = 38


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter's instructions ``(code, jt, jf, k)`` for ``machine`` (default: this one)."""
    arch, _, setsid, setpgid, x32, socket, io_uring_setup, socketpair = _ABIS[machine or platform.machine()]
    body: list[tuple[int, Any, Any, int]] = [(_LD_W_ABS, 0, 0, 4), (_JEQ_K, 0, "deny", arch), (_LD_W_ABS, 0, 0, 0)]
    if x32:
        body.append((_JGE_K, "deny", 0, x32))
    body += [(_JEQ_K, "deny", 0, call) for call in (setsid, setpgid, socket, io_uring_setup)]
    body += [(_JEQ_K, 0, "allow", socketpair),  # a pair: only the connected kinds (a datagram end can
             (_LD_W_ABS, 0, 0, _ARG1_LOW),       # still send to any pathname socket)
             (_ALU_AND_K, 0, 0, _SOCK_TYPE_MASK),
             (_JEQ_K, "allow", 0, _SOCK_STREAM),
             (_JEQ_K, "allow", "deny", _SOCK_SEQPACKET)]
    body += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    labels = {"allow": len(body) - 2, "deny": len(body) - 1}
    # a jump's offsets count the instructions skipped after the jump itself (forward only)
    return [(code, labels[jt] - i - 1 if jt in labels else jt, labels[jf] - i - 1 if jf in labels else jf, k)
            for i, (code, jt, jf, k) in enumerate(body)]


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def fix_process_group() -> str | None:
    """Install the filter on every thread of this process. Returns None when it applies, else why
    not (an unknown machine, a kernel without seccomp filters, a refused call). Never raises."""
    machine = platform.machine()
    if machine not in _ABIS:
        return f"no seccomp filter for {machine}"
    insns = program(machine)
    filters = (_Filter * len(insns))(*[_Filter(*i) for i in insns])
    prog = _Prog(len(insns), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    rc = libc.syscall(ctypes.c_long(_ABIS[machine][1]), ctypes.c_uint(_SET_MODE_FILTER),
                      ctypes.c_uint(_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        err = ctypes.get_errno()
        return (f"seccomp failed: thread {rc} has another filter" if rc > 0
                else f"seccomp failed: {os.strerror(err) if err else 'unknown error'}")
    return None


def packed(machine: str | None = None) -> bytes:
    """The filter as the kernel reads it (8 bytes an instruction), for inspection and tests."""
    return b"".join(struct.pack("=HBBI", *i) for i in program(machine))


__all__ = ["fix_process_group", "program", "packed"]
