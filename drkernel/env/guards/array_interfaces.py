"""NumPy's array interfaces turned off in the candidate's process (CPU and GPU workers).

NumPy turns any object with an ``__array_interface__`` (a dict with a raw ``data`` address) or an
``__array_struct__`` into an array over that memory, with no check and no audit event. From Python,
with an address (``id()``, a default ``hash()`` or ``repr()``, ``Tensor.data_ptr()``), that is
arbitrary memory access: ``"<f8"`` views read and write any word, ``"|O"`` views turn an address
into the object there. A black-box red team used it to walk the
interpreter's frames to the worker's ``call`` and overwrite its start time (CPU relu timed at
0.067 ms against 2.6 ms, matmul 0.095 against 13 ms), and to let NumPy compute the output over a
tensor's memory while a one-element kernel counted as the work. From there nothing in the process
is safe (the seal's snapshot, the harness's objects).

NumPy looks both names up through interned strings it keeps in its extension's static data. Before
the candidate's code exists, :func:`disable_array_interfaces` finds those slots in the extension's
own writable load segments (its data and ``.bss``, bounded by its ELF program headers: no other
memory is read or written, and it writes only when each name is found exactly once) and points them
at names nobody can know (random per process): NumPy then treats such objects as opaque Python
objects. Checked right after (an object with an interface over a buffer of
ours must come out as an object array); the worker reports the outcome with its isolation.
NumPy's own ``as_strided`` (and what uses it: ``sliding_window_view``, ``vectorize`` with a
signature) relies on an interface and stops working in the worker; neither the harness, torch nor
Triton's interpreter uses them there.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

_NAMES = ("__array_interface__", "__array_struct__")
_KEEP: list[str] = []  # the replacement names: alive for the process's life (NumPy holds them borrowed)


def _writable_segments(so_path: str) -> list[tuple[int, int]] | None:
    """``[lo, hi)`` of each of the extension's own writable load segments in memory (its data and
    ``.bss``), from its ELF program headers and the address it is mapped at; None if it cannot be
    told."""
    import struct

    with open(so_path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:  # 64-bit little-endian only
            return None
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    loads = []
    for i in range(phnum):
        p_type, p_flags, _off, vaddr, _paddr, _filesz, memsz, _align = struct.unpack_from("<IIQQQQQQ", table,
                                                                                           i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((vaddr, memsz, p_flags))
    writable = [seg for seg in loads if seg[2] & 2]
    if not writable:
        return None
    base = None
    with open("/proc/self/maps") as fh:
        for line in fh:
            row = line.split()
            if len(row) >= 6 and row[5] == so_path and int(row[2], 16) == 0:
                base = int(row[0].split("-")[0], 16) - (min(v for v, _, _ in loads) & ~0xFFF)
                break
    if base is None:
        return None
    return [((base + vaddr + 7) & ~7, (base + vaddr + memsz) & ~7) for vaddr, memsz, _ in writable]


def disable_array_interfaces() -> dict[str, Any]:
    """Point NumPy's interned interface names elsewhere; returns what was done and whether the check
    passed (``{"disabled": bool, "slots": {...}, "reason": ...}``)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return {"disabled": True, "slots": {}, "reason": "numpy is not installed"}
    core = getattr(np, "_core", None) or getattr(np, "core")
    umath = getattr(core, "_multiarray_umath", None)
    so = os.path.realpath(getattr(umath, "__file__", "") or "")
    if not so:
        return {"disabled": False, "slots": {}, "reason": "numpy's _multiarray_umath extension not found"}
    segments = _writable_segments(so)
    if not segments:
        return {"disabled": False, "slots": {}, "reason": "numpy's extension's writable segments not found"}
    found: dict[str, list[int]] = {name: [] for name in _NAMES}
    targets = {id(sys.intern(name)): name for name in _NAMES}
    for lo, hi in segments:
        words = (ctypes.c_uint64 * ((hi - lo) // 8)).from_address(lo)
        for i, w in enumerate(words):
            if w in targets:
                found[targets[w]].append(lo + 8 * i)
    slots = {name: len(addrs) for name, addrs in found.items()}
    if any(n != 1 for n in slots.values()):  # only the one slot each NumPy keeps: nothing else is touched
        return {"disabled": False, "slots": slots, "reason": "not exactly one slot per name in numpy's data"}
    incref = ctypes.pythonapi.Py_IncRef
    incref.argtypes = [ctypes.py_object]
    for name, addrs in found.items():
        replacement = sys.intern(f"{name}{os.urandom(8).hex()}__")
        _KEEP.append(replacement)
        incref(replacement)  # NumPy owns a reference to what its slot holds
        ctypes.c_uint64.from_address(addrs[0]).value = id(replacement)
    ok, reason = _check(np)
    return {"disabled": ok, "slots": slots, "reason": reason}


def _check(np: Any) -> tuple[bool, str | None]:
    """An object exposing an interface over a buffer of ours must not become a view of it."""
    buf = bytearray(16)
    probe = type("_Probe", (), {})()
    address = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    setattr(probe, _NAMES[0], {"data": (address, False), "shape": (2,), "typestr": "<u8", "version": 3})
    try:
        arr = np.asarray(probe)
    except Exception as exc:  # noqa: BLE001 - refused outright is fine too
        return True, f"refused ({type(exc).__name__})"
    del probe
    if arr.dtype == np.dtype(object):
        return True, None
    return False, "NumPy still reads __array_interface__ (the interned name was not found)"


__all__ = ["disable_array_interfaces"]
