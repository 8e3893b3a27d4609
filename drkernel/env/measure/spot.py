"""Which elements of a checked timed output come back: all of a small output, a random sample of a
large one.

A timed call's output is checked (or not) by a decision the grader makes after the call returned
(:class:`~drkernel.env.measure.timing.SpotChannel`). A kept output of at most twice ``k`` elements
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

Indices are SplitMix64 outputs (a counter-based generator: index ``i`` is a hash of ``seed`` and
``i``), computed with torch's integer operations on the output's own device, so both processes get
the same ones whatever their devices, and no index crosses a bus. (Drawn on the CPU with torch's
Mersenne Twister and copied to the GPU, 2^20 indices took ~7-10 ms per checked call, inside the
timed section: ~20% of a timing's hold of the GPU on the bundled elementwise tasks.) The worker's
sampler is bound before the candidate loads (:func:`make_sampler`).
"""

from __future__ import annotations

from typing import Any, Callable

CHECK_ALL_TIMED = 5
"""At most this many timed calls (the CPU's quick protocol has 3): every timed output is checked."""

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


SAMPLER_OPS = ("arange", "mul", "add", "bitwise_xor", "bitwise_and", "bitwise_right_shift", "remainder")
"""The torch functions :func:`sample_index` uses (:func:`make_sampler` binds them)."""

_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def _int64(c: int) -> int:
    """``c`` (mod 2^64) as the signed 64-bit value with the same bits."""
    c &= _MASK64
    return c - (1 << 64) if c >> 63 else c


def splitmix64(seed: int, i: int) -> int:
    """The reference, in Python: the ``i``-th output (from 0) of SplitMix64 started at ``seed``,
    ``z = seed + (i + 1) * golden; z = (z ^ z >> 30) * m1; z = (z ^ z >> 27) * m2; z ^ z >> 31``
    (mod 2^64, logical shifts)."""
    z = (seed + (i + 1) * _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def make_sampler(torch: Any) -> Callable[..., Any]:
    """``sample(numel, seed, size, device="cpu")``: :func:`sample_index` with everything it uses
    bound now, in the closure: torch's functions (:data:`SAMPLER_OPS`), the int64 dtype, the
    constants and ``int``. The worker makes its sampler before the candidate loads, so no later
    rebinding of this module's globals, torch's attributes or builtins reaches it (a replaced helper
    here could have handed the candidate the seed before the copy)."""
    arange, mul, add, xor, band, shr, rem = (getattr(torch, name) for name in SAMPLER_OPS)
    int64, to_int = torch.int64, int
    golden, mix1, mix2 = _int64(_GOLDEN), _int64(_MIX1), _int64(_MIX2)
    low63 = (1 << 63) - 1

    def sample(numel: int, seed: int, size: int, device: Any = "cpu") -> Any:
        numel, seed, size = to_int(numel), to_int(seed) & 0xFFFFFFFFFFFFFFFF, to_int(size)
        if size <= 0 or numel <= 0:
            return None
        z = add(mul(arange(1, size + 1, dtype=int64, device=device), golden),
                seed - (1 << 64) if seed >> 63 else seed)
        z = mul(xor(z, band(shr(z, 30), (1 << 34) - 1)), mix1)
        z = mul(xor(z, band(shr(z, 27), (1 << 37) - 1)), mix2)
        z = xor(z, band(shr(z, 31), (1 << 33) - 1))
        return rem(band(z, low63), numel)
    return sample


def sample_index(numel: int, seed: int, size: int, torch: Any, device: Any = "cpu") -> Any:
    """The ``size`` flat indices (int64 tensor on ``device``, uniform with replacement) read back of
    an output of ``numel`` elements, or None for the whole output (``size`` 0): index ``i`` is
    ``splitmix64(seed, i) mod 2^63 mod numel`` (the modulo's bias is below ``numel / 2^63``). The
    same on every device: int64 arithmetic wraps mod 2^64 and shifts are made logical by a mask.
    The worker uses :func:`make_sampler`, bound before the candidate loads."""
    return make_sampler(torch)(numel, seed, size, device)


__all__ = ["CHECK_ALL_TIMED", "ANSWER_BYTES", "SAMPLER_OPS", "sample_size", "encode_keep", "decode_keep", "make_sampler", "sample_index",
           "splitmix64"]
