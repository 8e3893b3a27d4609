"""NumPy's array interfaces turned off in the candidate's process (CPU and GPU workers).

NumPy turns any object with an ``__array_interface__`` (a dict with a raw ``data`` address) or an
``__array_struct__`` into an array over that memory, with no check and no audit event. From Python,
with an address (``id()``, a default ``hash()`` or ``repr()``, ``Tensor.data_ptr()``), that is
arbitrary memory access: ``"<f8"`` views read and write any word, ``"|O"`` views turn an address
into the object there. The second outside red team (2026-11-27, black box) used it to walk the
interpreter's frames to the worker's ``call`` and overwrite its start time (CPU relu timed at
0.067 ms against 2.6 ms, matmul 0.095 against 13 ms), and to let NumPy compute the output over a
tensor's memory while a one-element kernel counted as the work. From there nothing in the process
is safe (the seal's snapshot, the harness's objects).

NumPy looks both names up through interned strings it keeps in its extension's static data. Before
the candidate's code exists, :func:`disable_array_interfaces` finds those slots (the writable
pages of NumPy's ``_multiarray_umath`` extension and the anonymous pages right after them, its
``.bss``) and points them at names nobody can know (random per process): NumPy then treats such
objects as opaque Python objects. Checked right after (an object with an interface over a buffer of
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


def _extension_pages(so_path: str) -> list[tuple[int, int]]:
    """Writable pages of the extension and the anonymous ones right after its mappings."""
    with open("/proc/self/maps") as fh:
        rows = [line.split() for line in fh]
    pages, after = [], False
    for row in rows:
        path = row[5] if len(row) >= 6 else ""
        lo, hi = (int(x, 16) for x in row[0].split("-"))
        if path == so_path:
            if "w" in row[1]:
                pages.append((lo, hi))
            after = True
        elif after and not path and "w" in row[1]:
            pages.append((lo, hi))
        else:
            after = False
    return pages


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
    pages = _extension_pages(so)
    slots: dict[str, int] = {}
    for name in _NAMES:
        target = id(sys.intern(name))
        found = []
        for lo, hi in pages:
            words = (ctypes.c_uint64 * ((hi - lo) // 8)).from_address(lo)
            found += [lo + 8 * i for i, w in enumerate(words) if w == target]
        replacement = sys.intern(f"{name}{os.urandom(8).hex()}__")
        _KEEP.append(replacement)
        for addr in found:
            ctypes.c_uint64.from_address(addr).value = id(replacement)
        slots[name] = len(found)
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
