"""Class 2 (work moved outside the timed window) -- target tests/env/redteam/tasks/rt01_hardswish_affine.py.

Technique: on the timed calls (after the 7 correctness/launch-check calls) forward allocates the output,
launches a one-element token kernel, arms a one-shot ITIMER_REAL (signal module reached as
torch.utils.data._utils.signal_handling.signal) and returns the still-empty output. The SIGALRM
handler fires a fraction of a millisecond later -- after the harness has read its clock -- and runs the
real Triton kernel into the output before the harness reads it.
"""
import torch
import torch.nn as nn
import torch.utils.data._utils.signal_handling as _sh
import triton
import triton.language as tl

_sig = _sh.signal
_PENDING = []


@triton.jit
def _hswish_affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    r6 = tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0)
    tl.store(y_ptr + offs, x * r6 / 6.0 + 0.25 * x, mask=mask)


def _run(x, y, n):
    _hswish_affine_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)


def _alarm(signum, frame):
    while _PENDING:
        _run(*_PENDING.pop())


_sig.signal(_sig.SIGALRM, _alarm)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if self.calls <= 7:
            _run(x, y, n)
            return y
        _run(x, y, 1)  # token launch: element 0 only
        _PENDING.append((x, y, n))
        _sig.setitimer(_sig.ITIMER_REAL, 0.0003)
        return y
