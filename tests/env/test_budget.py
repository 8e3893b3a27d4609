"""The timing's launch budget (drkernel/env/budget.py): sizing, compilation and the verify decision.

The hold itself only runs on CUDA (tests/gpu/test_gpu_grader.py runs it on an H100); here its
sizing arithmetic, its Triton source (compiled to PTX for sm_90 without a GPU) and the decision
taken from the probe are checked on CPU."""

import os
import subprocess
import sys
from types import SimpleNamespace

from drkernel.env import budget as B
from drkernel.env.budget import THREADS_PER_BLOCK, LaunchBudget, blocks_to_fill, fit_problem


def test_the_hold_is_sized_to_take_every_thread_slot_and_refuses_a_shape_that_cannot_fit():
    """The launch budget's hold must leave no SM room for another stream's kernel (budget.py)."""
    h100 = SimpleNamespace(multi_processor_count=132, max_threads_per_multi_processor=2048,
                           regs_per_multiprocessor=65536)
    blocks, per_sm = blocks_to_fill(h100)
    assert per_sm * THREADS_PER_BLOCK == 2048 and blocks == 132 * per_sm
    assert fit_problem(h100, per_sm, 32) is None  # 2048 threads x 32 registers = the whole file
    assert "registers" in fit_problem(h100, per_sm, 40)  # then fewer blocks fit: an SM would have room
    assert "32 resident blocks" in fit_problem(h100, 64, 8)


def test_the_hold_kernel_compiles_for_a_hopper_gpu_without_one():
    """The hold only runs on CUDA; its Triton source is compiled here (to PTX for sm_90, no GPU needed)
    so a kernel that does not parse never reaches a GPU machine."""
    code = (
        "import triton\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "from drkernel.env import budget as b\n"
        "src = ASTSource(fn=b._hold_kernel, signature={'start_ptr': '*i64', 'ns': 'i64'}, constexprs={})\n"
        "k = triton.compile(src, target=GPUTarget('cuda', 90, 32), options={'num_warps': b.THREADS_PER_BLOCK // 32})\n"
        "print(k.asm['ptx'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ptx = out.stdout
    assert "%globaltimer" in ptx and "atom.global" in ptx and "cas.b64" in ptx
    assert ".reqntid 1024" in ptx  # one block = 1024 threads: two fill an SM's thread slots



def test_verify_keeps_the_hold_only_when_the_probe_waited_for_it_and_probes_once(monkeypatch):
    gaps, calls = iter([0.0012]), []
    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: calls.append(blocks) or next(gaps))
    ok = LaunchBudget(blocks=264, verified=None)
    assert ok.verify(None) and ok.verify(None) and calls == [264]  # the second call reuses the answer
    assert ok.describe(1.0) == {"requested_ms": 1.0, "ms": 1.0, "verified": True, "blocks": 264,
                                "probe_gap_ms": 0.0012, "regs_per_thread": None, "reason": None}

    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: -0.041)  # the probe ran beside the hold
    leaky = LaunchBudget(blocks=2112, verified=None)
    assert not leaky.verify(None)
    d = leaky.describe(1.0)
    assert d["ms"] == 0.0 and not d["verified"] and "0.041 ms before the hold ended" in d["reason"]

    launched = []
    monkeypatch.setattr(B, "_launch", lambda *a: launched.append(a))
    leaky.hold(1.0)
    LaunchBudget(blocks=264, verified=None).hold(1.0)  # unverified: never launched either
    assert launched == []
    ok.hold(0.0)
    ok.hold(1.0)
    assert launched == [(None, 264, 1.0)]
