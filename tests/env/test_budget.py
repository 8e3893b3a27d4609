"""The timing's launch budget (drkernel/env/measure/budget.py): sizing, compilation and the verify decision.

The hold itself only runs on CUDA (tests/gpu/test_gpu_grader.py runs it on an H100); here its
sizing arithmetic, its Triton source (compiled to PTX for sm_90 without a GPU) and the decision
taken from the probe are checked on CPU."""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import triton

from drkernel.env.measure import budget as B
from drkernel.env.measure.budget import THREADS_PER_BLOCK, LaunchBudget, blocks_to_fill, fit_problem


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
    """The hold only runs on CUDA; its Triton source is compiled here (PTX and, with Triton's own
    ptxas, a cubin for sm_90, no GPU needed) so a kernel that does not parse never reaches a GPU
    machine, and one that needs more than 32 registers a thread (then two 1024-thread blocks no longer
    fit an SM and the hold leaves room beside it) fails here."""
    code = (
        "import json, triton\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "from drkernel.env.measure import budget as b\n"
        "src = ASTSource(fn=b._hold_kernel, signature={'start_ptr': '*i64', 'ns': 'i64'}, constexprs={})\n"
        "k = triton.compile(src, target=GPUTarget('cuda', 90, 32), options={'num_warps': b.THREADS_PER_BLOCK // 32})\n"
        "p = triton.compile(ASTSource(fn=b._stamp_kernel, signature={'out_ptr': '*i64'}, constexprs={}),\n"
        "                   target=GPUTarget('cuda', 90, 32))\n"
        "print(json.dumps({'hold': k.asm['ptx'], 'stamp': p.asm['ptx']}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ptx = json.loads(out.stdout.strip().splitlines()[-1])
    hold = ptx["hold"]
    assert "%globaltimer" in hold and "atom.global" in hold and "cas.b64" in hold
    assert "%clock64" in hold and "add.u64" in hold  # the clock's running sums
    assert ".reqntid 1024" in hold  # one block = 1024 threads: two fill an SM's thread slots
    assert "%globaltimer" in ptx["stamp"]
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if ptxas.exists():
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "hold.ptx").write_text(hold)
            res = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", str(Path(d) / "hold.ptx"), "-o",
                                  str(Path(d) / "hold.cubin")], capture_output=True, text=True, timeout=120)
        regs = re.search(r"Used (\d+) registers", res.stderr + res.stdout)
        assert res.returncode == 0 and regs, res.stderr[-1000:]
        assert int(regs.group(1)) <= 32, f"the hold uses {regs.group(1)} registers a thread"



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

    from drkernel.env.measure.timing import _budget_report

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
    (a time-slice from a starting spare can fail one) and stands for REFUSAL_TTL_S only; a refusal by
    the hold's own arithmetic stands for good, unprobed; no hold: None, and workers probe."""
    import contextlib

    built, gaps = [], iter([-0.3, -0.3, 0.0003])

    class Fake:
        @classmethod
        def prepare(cls, torch, device):
            built.append(device)
            if device == "cuda:1":
                raise RuntimeError("no such device")
            if device == "cuda:3":
                return LaunchBudget(blocks=132, verified=False, reason="the hold uses 40 registers a thread")
            return LaunchBudget(blocks=264, verified=None, regs_per_thread=18)

    class FakeTorch:
        class cuda:
            device = staticmethod(lambda d: contextlib.nullcontext())

    probes = []

    def probe(torch, start, blocks):
        probes.append(blocks)
        return next(gaps)

    now = [1000.0]
    monkeypatch.setattr(B, "LaunchBudget", Fake)
    monkeypatch.setattr(B, "_probe", probe)
    monkeypatch.setattr(B.time, "monotonic", lambda: now[0])
    for name in ("_VERDICTS", "_REFUSED", "_PREPARED"):
        monkeypatch.setattr(B, name, {})

    v = B.device_verdict(FakeTorch, "cuda:0")  # two interrupted probes, then a pass
    assert v == {"verified": True, "blocks": 264, "regs_per_thread": 18, "probe_gap_ms": 0.0003, "reason": None}
    assert B.device_verdict(FakeTorch, "cuda:0") is v and len(probes) == 3 and built == ["cuda:0"]
    assert B.known_verdict("cuda:0") == (True, v)

    assert B.device_verdict(FakeTorch, "cuda:1") is None and B.known_verdict("cuda:1") == (False, None)

    gaps = iter([-0.3] * (3 * B.DEVICE_PROBES))  # a leaky hold: every probe starts beside it
    probes.clear()
    no = B.device_verdict(FakeTorch, "cuda:2")
    assert no["verified"] is False and "before the hold ended" in no["reason"] and len(probes) == B.DEVICE_PROBES
    assert B.device_verdict(FakeTorch, "cuda:2") is no and len(probes) == B.DEVICE_PROBES  # within the TTL
    now[0] += B.REFUSAL_TTL_S + 1
    assert B.known_verdict("cuda:2") == (False, None)
    B.device_verdict(FakeTorch, "cuda:2")
    assert len(probes) == 2 * B.DEVICE_PROBES  # asked again after it

    probes.clear()
    fit = B.device_verdict(FakeTorch, "cuda:3")
    assert fit["verified"] is False and "registers" in fit["reason"] and probes == []
    now[0] += 1e6
    assert B.known_verdict("cuda:3") == (True, fit)  # the arithmetic's refusal stands
