"""Which elements of a checked timed output come back: all of a small output, a random sample of a
large one.

A timed call's output is checked (or not) by a decision the grader makes after the call returned
(:class:`~drkernel.env.timing.SpotChannel`). A kept output of at most twice ``k`` elements
(``EvalConfig.spot_sample``, 2^20 by default) comes back whole. Of a larger one, ``k`` elements come
back, at flat indices drawn (with replacement, uniformly) from a seed the grader sends with its
"keep" answer, after the call: the candidate's call is over before anyone knows which elements are
read. The
grader draws the same indices from the same seed and compares them with its reference, with the
tolerance of the whole output (``atol * rms(ref)`` over every element).

What the sample gives up: an output wrong in a fraction ``f`` of its elements (on the checked call
only: every correctness trial compares whole outputs) passes with probability ``(1 - f) ** k``,
``f`` = 1e-5 passes with probability e^-10.5 at ``k`` = 2^20. Skipping that share
of the work saves that share of the time: nothing a speedup can show. What it saves: a 256 MB
output (4096 x 16384 fp32, the bundled elementwise tasks) crossed the process boundary whole, up
to eight times per evaluation, ~0.15 s each on an H100 (copy out, file, read back, compare), and the
timed region held the GPU meanwhile.

Indices are drawn on the CPU with torch's Mersenne Twister, so both processes get the same ones
whatever their devices; the worker's sampler uses the functions it captured before the candidate
loaded.
"""

from __future__ import annotations

from typing import Any, Callable

ANSWER_BYTES = 17
"""A "keep" answer: ``b"1"``, the sample seed and the sample size (8 bytes each, big-endian)."""


def sample_size(numel: int, sample: int) -> int:
    """Elements to read back of an output of ``numel`` elements, 0 meaning all of them: a sample
    of ``sample`` elements when the output holds more than twice that (``sample`` 0: never)."""
    return sample if 0 < sample and 2 * sample < numel else 0


def encode_keep(seed: int, size: int) -> bytes:
    return b"1" + int(seed).to_bytes(8, "big") + int(size).to_bytes(8, "big")


def decode_keep(answer: bytes) -> tuple[int, int]:
    """``(seed, size)`` of a "keep" answer (ValueError when malformed)."""
    if len(answer) != ANSWER_BYTES or answer[:1] != b"1":
        raise ValueError(f"malformed keep answer of {len(answer)} bytes")
    return int.from_bytes(answer[1:9], "big"), int.from_bytes(answer[9:], "big")


def sample_index(numel: int, seed: int, size: int, torch: Any, randint: Callable[..., Any] | None = None,
                 generator: Callable[..., Any] | None = None) -> Any:
    """The ``size`` flat indices (CPU int64 tensor, uniform with replacement) read back of an output
    of ``numel`` elements, or None for the whole output (``size`` 0). ``randint``/``generator``:
    the worker passes the torch functions it captured at start (the candidate may have replaced
    the module's attributes)."""
    if size <= 0 or numel <= 0:
        return None
    g = (generator or torch.Generator)(device="cpu")
    g.manual_seed(int(seed) & ((1 << 63) - 1))
    return (randint or torch.randint)(0, int(numel), (int(size),), generator=g, dtype=torch.int64)


__all__ = ["ANSWER_BYTES", "sample_size", "encode_keep", "decode_keep", "sample_index"]
