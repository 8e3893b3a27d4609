"""Move tensors between the grader and the candidate's process without pickle.

The parent never unpickles anything the candidate's process produced: a hostile candidate could
otherwise run code in the grader. Candidate outputs travel as raw bytes, in the process's shared
output stage (:mod:`drkernel.env.process.staging`, descriptor ``{"stage": offset, "dtype", "shape"}``) or,
when they do not fit there, in files in the worker's private directory (``{"file", "dtype",
"shape"}``); the reader validates every field of a descriptor against a whitelist. (Inputs never
travel: both sides draw them from the seed, see :mod:`drkernel.env.protocol`.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64,
}
_NAMES = {v: k for k, v in DTYPES.items()}
MAX_NDIM = 16
CHUNK_BYTES = 32 << 20
"""GPU tensors move through a pinned host buffer of this size (one per thread): page-locked copies
run at full PCIe speed, where copying to or from mapped file pages ran at about 1 GB/s on an H100
machine (0.25 s for each 256 MB output, ten per evaluation of an elementwise task)."""
_local = threading.local()


def _pinned_chunk() -> torch.Tensor:
    buf = getattr(_local, "pinned", None)
    if buf is None:
        buf = _local.pinned = torch.empty(CHUNK_BYTES, dtype=torch.uint8, pin_memory=True)
    return buf


class TensorIOError(ValueError):
    """A descriptor or file that does not describe a valid tensor."""


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TensorIOError(f"unsupported dtype {dtype}") from None


def write_tensor(tensor: torch.Tensor, directory: Path, name: str, stage: Any = None) -> dict[str, Any]:
    """Write ``tensor`` (any device) as raw bytes; return its JSON descriptor.

    Into ``stage`` (a :class:`~drkernel.env.process.staging.Stage`) when it has room; else to a file: a GPU
    tensor goes through this thread's pinned buffer in :data:`CHUNK_BYTES` pieces, a CPU tensor is
    copied straight into the file, sized first and mapped."""
    t = tensor.detach()
    name_of_dtype = dtype_name(t.dtype)
    if stage is not None:
        offset = stage.put(t)
        if offset is not None:
            return {"stage": offset, "dtype": name_of_dtype, "shape": list(t.shape)}
    path = Path(directory) / f"{name}.bin"
    nbytes = t.numel() * t.element_size()
    if nbytes and t.is_cuda:
        flat = t.contiguous().reshape(-1).view(torch.uint8)
        buf = _pinned_chunk()
        view = memoryview(buf.numpy())
        with open(path, "wb") as fh:
            for off in range(0, nbytes, CHUNK_BYTES):
                n = min(CHUNK_BYTES, nbytes - off)
                buf[:n].copy_(flat[off:off + n])  # device -> pinned (synchronous)
                fh.write(view[:n])
        return {"file": path.name, "dtype": name_of_dtype, "shape": list(t.shape)}
    with open(path, "wb") as fh:
        fh.truncate(nbytes)
    if nbytes:
        mapped = np.memmap(path, mode="r+", dtype=np.uint8, shape=(nbytes,))
        dest = torch.from_numpy(mapped).view(t.dtype).view(t.shape)
        dest.copy_(t)
        del dest
        mapped.flush()
        del mapped
    return {"file": path.name, "dtype": name_of_dtype, "shape": list(t.shape)}


def read_tensor(desc: Any, directory: Path, device: torch.device | str | None = None,
                stage: Any = None) -> torch.Tensor:
    """Read a tensor from a descriptor, validating every field (the descriptor may be hostile).

    A stage descriptor is copied out of ``stage`` (to ``device``, or a CPU copy). ``device`` a GPU:
    a file is read through this thread's pinned buffer straight into device memory (if the device
    has no room, the tensor is returned on the CPU, mapped)."""
    if isinstance(desc, dict) and set(desc) == {"stage", "dtype", "shape"}:
        return _read_staged(desc, device, stage)
    if not isinstance(desc, dict) or set(desc) != {"file", "dtype", "shape"}:
        raise TensorIOError(f"malformed tensor descriptor: {str(desc)[:200]}")
    fname, dname, shape = desc["file"], desc["dtype"], desc["shape"]
    if not isinstance(fname, str) or os.sep in fname or fname.startswith(".") or not fname.endswith(".bin"):
        raise TensorIOError(f"bad tensor file name {fname!r}")
    dtype, numel, nbytes = _layout(dname, shape)
    path = Path(directory) / fname
    size = path.stat().st_size if path.exists() else -1
    if size != nbytes:
        raise TensorIOError(f"tensor file {fname} has {size} bytes, descriptor says {nbytes}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    if device is not None and torch.device(device).type == "cuda":
        try:
            return _read_to_device(path, nbytes, torch.device(device)).view(dtype).reshape(shape)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()  # the candidate may hold most of the GPU: compare on the CPU
    # A private (copy-on-write) mapping: pages are read as the comparison touches them (no read()
    # copy). As with any read after the reply, the file is the candidate's until it is unlinked.
    raw = torch.from_numpy(np.memmap(path, mode="c", dtype=np.uint8, shape=(nbytes,)))
    return raw.view(dtype).reshape(shape)


def _layout(dname: Any, shape: Any) -> tuple[torch.dtype, int, int]:
    """(dtype, elements, bytes) of a descriptor's validated dtype and shape."""
    if not isinstance(dname, str) or dname not in DTYPES:
        raise TensorIOError(f"unsupported dtype {dname!r}")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s < (1 << 48) for s in shape):
        raise TensorIOError(f"bad shape {shape!r}")
    dtype = DTYPES[dname]
    numel = 1
    for s in shape:
        numel *= s
    if numel >= 1 << 48:
        raise TensorIOError(f"shape {shape!r} has too many elements")
    return dtype, numel, numel * torch.empty((), dtype=dtype).element_size()


def _read_staged(desc: dict[str, Any], device: torch.device | str | None, stage: Any) -> torch.Tensor:
    from drkernel.env.process.staging import StageError

    dtype, numel, nbytes = _layout(desc["dtype"], desc["shape"])
    shape = desc["shape"]
    if stage is None:
        raise TensorIOError("a stage descriptor, but this process has no output stage")
    if numel == 0:
        raise TensorIOError("an empty tensor cannot come through the stage")
    try:
        src = stage.view(desc["stage"], nbytes)
    except StageError as exc:
        raise TensorIOError(str(exc)) from None
    if device is not None and torch.device(device).type == "cuda":
        try:
            return src.to(device).view(dtype).reshape(shape)  # registered host -> device: DMA
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()  # the candidate may hold most of the GPU: compare on the CPU
    return src.clone().view(dtype).reshape(shape)


def _read_to_device(path: Path, nbytes: int, device: torch.device) -> torch.Tensor:
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buf = _pinned_chunk()
    view = memoryview(buf.numpy())
    with open(path, "rb") as fh:
        off = 0
        while off < nbytes:
            n = fh.readinto(view[:min(CHUNK_BYTES, nbytes - off)])
            if not n:
                raise TensorIOError(f"tensor file {path.name} ended after {off} of {nbytes} bytes")
            dst[off:off + n].copy_(buf[:n])  # pinned -> device (synchronous: the buffer is reused)
            off += n
    return dst
