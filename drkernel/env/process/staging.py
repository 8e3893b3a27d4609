"""Candidate outputs through memory both processes map: :class:`Stage`.

Every candidate process is given, when it starts, a *stage*: an empty anonymous shared-memory file
(``memfd``) sealed against shrinking (neither side can make the other's mapping fault: a truncated
file would raise SIGBUS in the grader). When the grader loads a candidate it sizes the stage to what
it will read (the largest output it expects, :func:`reserve_bytes`, at most :data:`STAGE_BYTES`)
and seals it against growing too, so the candidate cannot park memory in it beyond that (pages of a
memfd are not in a process's resident size); both sides map it and, on a GPU, register it with CUDA
(page-locked: device <-> host copies run as DMA at full speed, no staging copy through a bounce
buffer and no file in between).

During a request the worker copies each output into the stage at the next free aligned offset
(:meth:`Stage.put`, reset per request by :meth:`Stage.rewind`) and replies with the descriptor
``{"stage": offset, "dtype", "shape"}``; an output that does not fit goes to a file as before
(:mod:`drkernel.env.process.tensor_io`). The grader copies an output out (to its GPU, or a CPU clone)
before it sends the next request.

Why: the file path wrote every output to /dev/shm through a 32 MB pinned chunk and read it back the
same way; at 8 evaluations in flight on an H100 that was 2.8-3.3 s per evaluation of an elementwise
task (seven 256 MB outputs), inside the GPU gate's shared side, where every waiting timing waited
for it (docs/results/h100-2026-11-26b.md).

Trust: the stage is the candidate's to write while its code runs, as its files are; the grader
only reads it, validates every descriptor against the reserved size (:meth:`Stage.view`), and
copies what it reads before the candidate runs again. The grader never writes into it, so the
candidate learns nothing from it.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import threading
import warnings
from typing import Any

STAGE_BYTES = 8 << 30
"""The largest stage (outputs above this go to files)."""
ALIGN = 1 << 16
"""Offsets of outputs in the stage (and reserved sizes) are multiples of this."""
_FIXED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def align(n: int) -> int:
    return (int(n) + ALIGN - 1) // ALIGN * ALIGN


def reserve_bytes(output_bytes: int, kept_outputs: int, kept_bytes: int) -> int:
    """Stage bytes one evaluation reads: one correctness output at a time, or the kept timed outputs
    of the timing request together (``kept_outputs`` of at most ``kept_bytes`` each)."""
    return min(STAGE_BYTES, max(align(output_bytes), kept_outputs * align(kept_bytes)))


class StageError(ValueError):
    """A stage descriptor outside the reserved part of the stage."""


class Stage:
    """One side's view of a stage: the grader creates it (:meth:`create`), the worker wraps the file
    descriptor it was given (:meth:`attach`). :meth:`reserve` maps it and registers the reserved
    part with CUDA when ``cuda`` (falling back to pageable copies, with a warning, when
    registration fails)."""

    def __init__(self, fd: int, size: int = STAGE_BYTES):
        self.fd = fd
        self.size = size
        self.limit = STAGE_BYTES
        self.owner = False  # the grader's side (created it): only it sizes the stage
        self.reserved = 0
        self.registered = 0
        self._map: mmap.mmap | None = None
        self._base: Any = None  # a uint8 tensor over the whole mapping
        self._cursor = 0
        self._lock = threading.Lock()

    # -- the two sides -----------------------------------------------------------------------------
    @classmethod
    def create(cls, limit: int = STAGE_BYTES) -> "Stage":
        """A new, empty memfd sealed against shrinking (the grader's side; pass :attr:`fd` to the
        child); :meth:`reserve` sizes it once, up to ``limit``, and seals it."""
        fd = os.memfd_create("drkernel-stage", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        except OSError:
            os.close(fd)
            raise
        stage = cls(fd, 0)
        stage.limit, stage.owner = limit, True
        return stage

    @classmethod
    def attach(cls, fd: int) -> "Stage":
        """The worker's side: a stage file descriptor received at start (seals are checked, so a
        stage that could shrink under the grader is never used; its size is read when reserved)."""
        if not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
            raise StageError("the stage file is not sealed against shrinking")
        return cls(fd, os.fstat(fd).st_size)

    # -- mapping -----------------------------------------------------------------------------------
    def reserve(self, nbytes: int, cuda: bool) -> int:
        """Size the stage (the grader, once: then sealed) or read its size (the worker), map it and
        make its first ``nbytes`` (aligned) usable; on a GPU, register them with CUDA. Returns the
        reserved size."""
        with self._lock:
            if self._map is None:
                import torch

                seals = fcntl.fcntl(self.fd, fcntl.F_GET_SEALS)
                if self.owner and not seals & fcntl.F_SEAL_GROW:  # the grader's first reservation fixes the size
                    os.ftruncate(self.fd, min(align(nbytes), self.limit))
                    fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _FIXED & ~fcntl.F_SEAL_SHRINK)
                self.size = os.fstat(self.fd).st_size
                if not self.size or fcntl.fcntl(self.fd, fcntl.F_GET_SEALS) & _FIXED != _FIXED:
                    raise StageError("the stage is not sized and sealed")
                self._map = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED,
                                      prot=mmap.PROT_READ | mmap.PROT_WRITE)
                self._base = torch.frombuffer(self._map, dtype=torch.uint8, count=self.size)
            n = min(align(nbytes), self.size)
            if cuda and n > self.registered:
                self._unregister()
                self._register(n)
            self.reserved = max(self.reserved, n)
            return self.reserved

    def _register(self, n: int) -> None:
        import torch

        rt = torch.cuda.cudart()
        err = rt.cudaHostRegister(self._base.data_ptr(), n, 0)
        if _code(err) != 0:
            _clear_cuda_error()  # else the next kernel launch reports this failure as its own
            warnings.warn(f"drkernel: cudaHostRegister of the output stage failed ({err}); outputs are copied "
                          "through pageable memory (slower)", RuntimeWarning, stacklevel=3)
            return
        self.registered = n

    def _unregister(self) -> None:
        if self.registered:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self._base.data_ptr())
            self.registered = 0

    # -- the worker writes ---------------------------------------------------------------------------
    def rewind(self) -> None:
        """A new request: its outputs start at offset 0 (the grader has copied the last request's)."""
        self._cursor = 0

    def put(self, tensor: Any) -> int | None:
        """Copy ``tensor``'s bytes (logical row-major order) to the next free offset of the reserved
        part; None when it does not fit (the caller writes a file instead)."""
        t = tensor.detach()
        nbytes = t.numel() * t.element_size()
        off = self._cursor
        if self._base is None or nbytes == 0 or off + nbytes > self.reserved:
            return None
        flat = t.contiguous().reshape(-1).view(self._base.dtype)
        self._base[off:off + nbytes].copy_(flat)  # device -> registered host: DMA, synchronous
        self._cursor = align(off + nbytes)
        return off

    # -- the grader reads ----------------------------------------------------------------------------
    def view(self, offset: Any, nbytes: int) -> Any:
        """The ``nbytes`` at ``offset`` (validated: an aligned offset inside the reserved part)."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or offset % ALIGN:
            raise StageError(f"bad stage offset {offset!r}")
        if self._base is None or offset + nbytes > self.reserved:
            raise StageError(f"{nbytes} bytes at stage offset {offset} are outside the reserved "
                             f"{self.reserved} bytes")
        return self._base[offset:offset + nbytes]

    def close(self) -> None:
        """Unregister, unmap and close (the grader: after the candidate's last output was copied)."""
        with self._lock:
            if self._base is not None:
                if self.registered:
                    self._unregister()
                self._base = None
            if self._map is not None:
                try:
                    self._map.close()
                except BufferError:  # a view is still alive somewhere: the mapping goes with it
                    pass
                self._map = None
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


def _code(err: Any) -> int:
    return int(getattr(err, "value", err))


def _clear_cuda_error() -> None:
    """Reset the CUDA runtime's last error (``cudaGetLastError`` of the libcudart this process
    loaded; torch's bindings do not expose it)."""
    import ctypes

    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "libcudart" in line and line.split()[-1].startswith("/")}
        for path in paths:
            ctypes.CDLL(path).cudaGetLastError()
    except (OSError, AttributeError):
        pass


__all__ = ["Stage", "StageError", "STAGE_BYTES", "ALIGN", "align", "reserve_bytes"]
