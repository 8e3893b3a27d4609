"""The grader's own use of the device, shared by every stage: which device, its CUDA cache, the
stream of each evaluation, TF32 off for the reference.

Cross-cutting (the reference outputs, the comparisons and the timing's spot checks all give memory
back here), so it lives beside :mod:`~drkernel.env.config` and :mod:`~drkernel.env.result` rather
than in one room. Runs in the grader only.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch

from drkernel.env.result import EnvironmentFailure


def resolve_device(device: str) -> str:
    """``cuda`` -> ``cuda:<current>``; checks that CUDA is there (EnvironmentFailure otherwise)."""
    if device == "cpu":
        return device
    if not torch.cuda.is_available():
        raise EnvironmentFailure(f"device {device!r} requested but torch.cuda.is_available() is False")
    return f"cuda:{torch.cuda.current_device()}" if device == "cuda" else device


SHORT_OF_MEMORY = 0.25
"""The grader gives the idle part of its CUDA cache (reserved, not allocated) back (``empty_cache``)
when less than this share of the device is free, or when that idle part exceeds
:data:`GRADER_CACHE_SHARE` of the device, and never when it is below :data:`IDLE_FLOOR`: emptying
frees memory with ``cudaFree``, which waits for the whole device, so it is not done after every
evaluation nor for a few blocks; the cap keeps what a candidate can allocate from depending much on
what the grader did before."""
GRADER_CACHE_SHARE = 0.2
IDLE_FLOOR = 0.02
"""Idle cache below this share of the device is not worth a wait for the whole device (on an H100
at 8 evaluations in flight the device was short of memory most of the time, and the grader emptied
its cache ~40 times in 32 evaluations, 0.05-0.2 s each, with every other evaluation's work stalled
behind it). The price: while the device is short, up to this share of it (1.6 GB of an H100) may
stay in the grader's cache instead of going to a candidate."""


def release_if_short(device: str) -> None:
    dev = torch.device(device)
    idle = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    free, total = torch.cuda.mem_get_info(dev)
    if idle > IDLE_FLOOR * total and (free < SHORT_OF_MEMORY * total or idle > GRADER_CACHE_SHARE * total):
        torch.cuda.empty_cache()


_STREAMS_GUARD = threading.Lock()
_FREE_STREAMS: dict[str, list[Any]] = {}


@contextlib.contextmanager
def evaluation_stream(device: str) -> Iterator[Any]:
    """The current stream of one evaluation's thread: not used by another evaluation in flight,
    and given back for later evaluations. The caching allocator reuses freed memory only on the
    stream it was allocated on: ``torch.cuda.Stream()`` per evaluation hands out torch's pooled
    streams in rotation (32 per device), so each evaluation's freed memory waited for the rotation
    to come back, the cache grew by an evaluation's peak per evaluation until it was emptied, and
    emptying it (``cudaFree`` waits for the device) stalled every evaluation. (Beyond 32 evaluations
    in flight, two entries here may be the same CUDA stream: their work serialises, still correct.)"""
    with _STREAMS_GUARD:
        free = _FREE_STREAMS.setdefault(device, [])
        stream = free.pop() if free else torch.cuda.Stream(device)
    try:
        with torch.cuda.stream(stream):
            yield stream
    finally:
        with _STREAMS_GUARD:
            _FREE_STREAMS[device].append(stream)


_TF32_LOCK = threading.Lock()
_TF32_STATE: dict[str, Any] = {"active": 0, "saved": None}


@contextlib.contextmanager
def fp32_exact() -> Iterator[None]:
    """TF32 off for the reference's matmuls and convolutions while any evaluation runs, and the
    caller's settings restored when the last one ends (ref-counted across threads)."""
    with _TF32_LOCK:
        if _TF32_STATE["active"] == 0:
            _TF32_STATE["saved"] = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        _TF32_STATE["active"] += 1
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        with _TF32_LOCK:
            _TF32_STATE["active"] -= 1
            if _TF32_STATE["active"] == 0:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _TF32_STATE["saved"]
