"""Move tensors between the grader and the candidate's process without pickle.

The parent never unpickles anything the candidate's process produced: a hostile candidate could
otherwise run code in the grader. Candidate outputs travel as raw bytes in files in the worker's
private directory and as a small JSON descriptor ``{"file", "dtype", "shape"}`` whose every field
the reader validates against a whitelist. (Inputs never travel: both sides draw them from the
seed, see :mod:`drkernel.env.protocol`.)
"""

from __future__ import annotations

import os
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


class TensorIOError(ValueError):
    """A descriptor or file that does not describe a valid tensor."""


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TensorIOError(f"unsupported dtype {dtype}") from None


def write_tensor(tensor: torch.Tensor, directory: Path, name: str) -> dict[str, Any]:
    """Write ``tensor`` (any device) as raw bytes; return its JSON descriptor.

    The file is sized first and mapped, and the tensor is copied straight into the mapping (from
    the GPU: one device-to-host copy, no staging tensor, no write() copy)."""
    t = tensor.detach()
    name_of_dtype = dtype_name(t.dtype)
    path = Path(directory) / f"{name}.bin"
    nbytes = t.numel() * t.element_size()
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


def read_tensor(desc: Any, directory: Path) -> torch.Tensor:
    """Read a tensor from a descriptor, validating every field (the descriptor may be hostile)."""
    if not isinstance(desc, dict) or set(desc) != {"file", "dtype", "shape"}:
        raise TensorIOError(f"malformed tensor descriptor: {str(desc)[:200]}")
    fname, dname, shape = desc["file"], desc["dtype"], desc["shape"]
    if not isinstance(fname, str) or os.sep in fname or fname.startswith(".") or not fname.endswith(".bin"):
        raise TensorIOError(f"bad tensor file name {fname!r}")
    if dname not in DTYPES:
        raise TensorIOError(f"unsupported dtype {dname!r}")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise TensorIOError(f"bad shape {shape!r}")
    dtype = DTYPES[dname]
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    path = Path(directory) / fname
    size = path.stat().st_size if path.exists() else -1
    if size != nbytes:
        raise TensorIOError(f"tensor file {fname} has {size} bytes, descriptor says {nbytes}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    # A private (copy-on-write) mapping: pages are read as the comparison touches them (no read()
    # copy). As with any read after the reply, the file is the candidate's until it is unlinked.
    raw = torch.from_numpy(np.memmap(path, mode="c", dtype=np.uint8, shape=(nbytes,)))
    return raw.view(dtype).reshape(shape)
