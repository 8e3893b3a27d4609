"""The mixed batch both the HTTP service and the Ray pool must grade right: honest, wrong and hacked
kernels from the adversarial corpus (tests/env/fixtures), and hanging, crashing, memory-hungry and
NaN/Inf-producing candidates on the conformance probe task."""

from __future__ import annotations

from pathlib import Path

from drkernel.env.conformance import CRASH, MEMORY_HOG, PROBE_TASK, _KERNEL
from drkernel.env.tasks.task import Task

FIX = Path(__file__).resolve().parents[1] / "env" / "fixtures"

#: Per-call options: the cheap protocol (no timing) with short deadlines and a small memory cap.
OPTIONS = {"measure_performance": False, "profile": False, "trials_per_distribution": 1,
           "distributions": ["native"], "determinism_check": False, "call_timeout_s": 8.0,
           "load_timeout_s": 30.0, "memory_limit_mb": 1500}

HANG = _KERNEL + '''
import time
class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(600)
        return _launch(x)
'''

# Incorrect kernels whose outputs are not finite where the reference is: the result then holds
# max_abs_err = Infinity (issue 24: such results must leave the service as valid JSON).
NAN_OUTPUT = _KERNEL.replace("tl.load(x_ptr + offs, mask=m) * 2.0",
                                                   "tl.sqrt(tl.load(x_ptr + offs, mask=m))") + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)  # sqrt of negative inputs: NaN
'''
INF_OUTPUT = _KERNEL.replace("tl.load(x_ptr + offs, mask=m) * 2.0", "tl.exp(tl.load(x_ptr + offs, mask=m) * 1000.0)") + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)  # exp(1000 x) overflows: +Inf
'''


def _fixture(task: str, candidate: str) -> tuple[Task, str]:
    return Task.from_file(FIX / "tasks" / task), (FIX / "candidates" / candidate).read_text()


def mixed_batch() -> list[tuple[str, Task, str]]:
    probe = Task.from_source(PROBE_TASK, name="probe")
    return [
        ("honest", *_fixture("relu.py", "honest/relu_basic.py")),
        ("wrong", *_fixture("relu.py", "wrong/relu_identity.py")),
        ("hacked", *_fixture("linear_relu.py", "hacks/pytorch_fallback.py")),
        ("hanging", probe, HANG),
        ("crashing", probe, CRASH),
        ("memory_hog", probe, MEMORY_HOG),
        ("nan_output", probe, NAN_OUTPUT),
        ("inf_output", probe, INF_OUTPUT),
    ]


def check_verdict(name: str, r) -> None:
    """Assert the verdict ``name`` must get (messages name the field that is off)."""
    summary = f"{name}: compiled={r.compiled} correct={r.correct} hacked={r.hacked} error={r.error}"
    if name == "honest":
        assert r.passed, summary
        return
    assert not r.passed, summary
    if name == "wrong":
        assert r.compiled and not r.correct and not r.hacked, summary
    elif name == "hacked":
        assert r.hacked and set(r.hack_reasons) & {"no_triton_kernel", "forward_no_launch", "no_triton_launch"}, summary
    elif name == "hanging":
        assert r.compiled and not r.correct and "timed out" in r.error.message, summary
    elif name == "crashing":
        assert r.compiled and not r.correct and r.error is not None, summary
    elif name == "memory_hog":
        assert r.compiled and not r.correct and "memory limit exceeded" in r.error.message, summary
    elif name in ("nan_output", "inf_output"):
        assert r.compiled and not r.correct and not r.hacked and r.error.stage == "correctness", summary
        assert "NaN/Inf" in r.error.message and r.details["first_failure"]["max_abs_err"] == float("inf"), summary
    else:
        raise KeyError(name)
