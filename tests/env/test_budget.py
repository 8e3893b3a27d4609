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
        "p = triton.compile(ASTSource(fn=b._stamp_kernel, signature={'out_ptr': '*i64'}, constexprs={}),\n"
        "                   target=GPUTarget('cuda', 90, 32))\n"
        "print(p.asm['ptx'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ptx = out.stdout
    assert "%globaltimer" in ptx and "atom.global" in ptx and "cas.b64" in ptx
    assert "%clock64" in ptx and "add.u64" in ptx  # the clock's running sums
    assert ".reqntid 1024" in ptx  # one block = 1024 threads: two fill an SM's thread slots



def test_verify_keeps_the_hold_only_when_the_probe_waited_for_it_and_probes_once(monkeypatch):
    gaps, calls = iter([0.0012]), []
    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: calls.append(blocks) or next(gaps))
    ok = LaunchBudget(blocks=264, verified=None)
    assert ok.verify(None) and ok.verify(None) and calls == [264]  # the second call reuses the answer
    assert ok.describe(1.0) == {"requested_ms": 1.0, "ms": 1.0, "verified": True, "blocks": 264,
                                "probe_gap_ms": 0.0012, "regs_per_thread": None, "reason": None,
                                "verified_by": "worker"}

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


def test_the_effective_clock_is_cycles_over_nanoseconds_of_the_holds_since_the_reset():
    """clock_mhz reads the publishing block's sums: 3,960,000 cycles in 2,000,000 ns is 1980 MHz;
    a reset clears the sums, not the start word; no hold since the reset gives None."""
    import torch

    from drkernel.env.timing import _budget_report

    b = LaunchBudget(blocks=264, verified=True, start=torch.tensor([123, 3_960_000, 2_000_000]))
    assert b.clock_mhz() == 1980.0
    assert _budget_report(b, 1.0, None)["sm_clock_mhz"] == 1980.0
    b.reset_clock()
    assert b.start.tolist() == [123, 0, 0] and b.clock_mhz() is None
    assert "sm_clock_mhz" not in _budget_report(b, 0.0, None)  # no hold asked for: no clock
    assert LaunchBudget(blocks=264, verified=None).clock_mhz() is None


def test_a_worker_adopts_the_graders_verdict_only_for_a_hold_of_the_same_shape(monkeypatch):
    """The grader probes the hold once per device while it holds the GPU exclusively; a worker takes
    that answer instead of probing beside other evaluations' kernels, but only for the same grid and
    register count, and never over an answer of its own."""
    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: (_ for _ in ()).throw(AssertionError("probed")))
    word = {"verified": True, "blocks": 264, "regs_per_thread": 18, "probe_gap_ms": 0.0003, "reason": None}
    b = LaunchBudget(blocks=264, verified=None, regs_per_thread=18)
    assert b.adopt(word) and b.verify(None)  # adopted: no probe here
    assert b.describe(1.0)["verified_by"] == "grader" and b.describe(1.0)["ms"] == 1.0

    leaky = LaunchBudget(blocks=264, verified=None, regs_per_thread=18)
    assert leaky.adopt({**word, "verified": False, "reason": "the hold does not fill the GPU"})
    assert not leaky.verify(None) and leaky.describe(1.0)["ms"] == 0.0

    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: 0.0004)
    for other in ({**word, "blocks": 132}, {**word, "regs_per_thread": 40}, {**word, "verified": None}, None, "yes"):
        mine = LaunchBudget(blocks=264, verified=None, regs_per_thread=18)
        assert not mine.adopt(other) and mine.verify(None)  # then it probes for itself
        assert mine.describe(1.0)["verified_by"] == "worker"
    decided = LaunchBudget(blocks=264, verified=False, regs_per_thread=18, reason="fit")
    assert not decided.adopt(word) and not decided.verify(None)  # a refusal of its own stands


def test_the_device_verdict_keeps_a_pass_retries_a_refusal_and_is_none_when_it_cannot_probe(monkeypatch):
    """A pass is kept for the process's life; a refusal needs DEVICE_PROBES failed probes in a row
    (a time-slice from a starting spare can fail one) and is asked again next time."""
    built, gaps = [], iter([-0.3, -0.3, 0.0003])

    class Fake:
        @classmethod
        def prepare(cls, torch, device):
            built.append(device)
            if device == "cuda:1":
                raise RuntimeError("no such device")
            return LaunchBudget(blocks=264, verified=None, regs_per_thread=18)

    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: next(gaps))

    class FakeTorch:
        class cuda:
            @staticmethod
            def device(d):
                import contextlib
                return contextlib.nullcontext()

    monkeypatch.setattr(B, "LaunchBudget", Fake)
    monkeypatch.setattr(B, "_VERDICTS", {})
    v = B.device_verdict(FakeTorch, "cuda:0")  # two interrupted probes, then a pass
    assert v == {"verified": True, "blocks": 264, "regs_per_thread": 18, "probe_gap_ms": 0.0003, "reason": None}
    assert B.device_verdict(FakeTorch, "cuda:0") is v and built == ["cuda:0"]
    assert B.device_verdict(FakeTorch, "cuda:1") is None and B.device_verdict(FakeTorch, "cuda:1") is None
    assert built == ["cuda:0", "cuda:1", "cuda:1"]

    probes = []
    monkeypatch.setattr(B, "_probe", lambda torch, start, blocks: probes.append(1) or -0.3)  # a leaky hold
    no = B.device_verdict(FakeTorch, "cuda:2")
    assert no["verified"] is False and "before the hold ended" in no["reason"] and len(probes) == B.DEVICE_PROBES
    B.device_verdict(FakeTorch, "cuda:2")
    assert len(probes) == 2 * B.DEVICE_PROBES  # not cached: probed again
