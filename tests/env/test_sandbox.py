"""A crashing, hanging, hostile or greedy candidate is a failed result, never a grader crash."""

import pytest

from drkernel.env.conformance import PROBE_TASK, _KERNEL
from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate

FAST = EvalConfig(device="cpu", measure_performance=False, profile=False, trials_per_distribution=1,
                  distributions=("native",), determinism_check=False)


def grade(body: str, **overrides):
    return evaluate(PROBE_TASK, _KERNEL + body, seed=0, config=FAST.with_overrides(**overrides))


@pytest.mark.slow
def test_memory_hog_is_killed_at_the_cap():
    r = grade('''
class ModelNew(nn.Module):
    def forward(self, x):
        hog = [torch.ones(64 << 20) for _ in range(64)]  # 16 GiB, touched page by page
        return _launch(x)
''', memory_limit_mb=1500)
    assert r.compiled and not r.correct
    assert "memory limit exceeded" in r.error.message


@pytest.mark.slow
def test_hang_at_import_times_out_as_a_compile_failure():
    r = grade('''
import time
time.sleep(600)
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)
''', load_timeout_s=6)
    assert not r.compiled and r.error.stage == "compile" and "timed out" in r.error.message


@pytest.mark.slow
def test_exit_in_constructor_is_a_compile_failure():
    r = grade('''
import os
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        os._exit(0)
    def forward(self, x):
        return _launch(x)
''')
    assert not r.compiled and r.error.stage == "compile" and "exit code 0" in r.error.message


def test_segfault_in_forward_is_a_failed_result():
    r = grade('''
import ctypes
class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return _launch(x)
''')
    assert r.compiled and not r.correct and r.error.stage == "correctness"
    assert "SIGSEGV" in r.error.message


@pytest.mark.slow
def test_exception_message_is_trimmed_to_the_candidates_frames():
    r = grade('''
class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("boom " * 2000)
''')
    assert not r.correct and "ValueError" in r.error.message and len(r.error.message) < 2600
    assert "drkernel/env/worker.py" not in r.error.message


@pytest.mark.slow
@pytest.mark.parametrize("ret", ["(x * 2.0, x)", "None", "x.tolist()"])
def test_non_tensor_outputs_fail_correctness(ret):
    r = grade(f'''
class ModelNew(nn.Module):
    def forward(self, x):
        _launch(x)
        return {ret}
''')
    assert r.compiled and not r.correct and "expected a single torch.Tensor" in r.error.message


@pytest.mark.slow
def test_broken_reference_is_a_task_error_not_a_verdict():
    from drkernel.env.task import TaskError

    broken = PROBE_TASK.replace("return x * 2.0", "raise RuntimeError('reference bug')")
    with pytest.raises(TaskError, match="reference bug"):
        evaluate(broken, _KERNEL + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return _launch(x)\n",
                 seed=0, config=FAST)


@pytest.mark.slow
def test_evaluate_restores_the_callers_tf32_settings():
    import torch

    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        grade("\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return _launch(x)\n")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
