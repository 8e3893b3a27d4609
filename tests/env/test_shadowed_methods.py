"""Tensors the harness reads after a call keep torch's own methods (drkernel.env.process.worker,
``Harness._shadowed``): a review found that an attribute set on a tensor instance (no audit event,
not a class change) shadows ``numel``, ``stride``, ``copy_``, ``is_floating_point``... for the
harness too, so the candidate's code ran inside its steps, off the clock. Each candidate here did
that and passed before; it must not pass now, and must be named for what it did."""

from pathlib import Path

import pytest

from drkernel.env.config import EvalConfig, cpu_fast
from drkernel.env.evaluation import evaluate

HERE = Path(__file__).parent
TASKS = HERE / "fixtures" / "tasks"


@pytest.mark.parametrize("candidate, task, stage, reason", [
    ("lazy_output_numel.py", "relu.py", "correctness", "the output carries attributes of its own"),
    ("input_method_shadowed.py", "relu.py", "correctness", "an input was given attributes"),
    ("param_copy_in_forward.py", "linear_relu.py", "correctness", "a parameter was given attributes"),
    ("param_copy_at_init.py", "linear_relu.py", "compile", "a tensor with attributes of its own"),
])
def test_a_tensor_whose_methods_are_shadowed_is_refused(candidate, task, stage, reason):
    r = evaluate(TASKS / task, HERE / "shadowed" / candidate, seed=1,
                 config=cpu_fast(EvalConfig(device="cpu", timing_trials=5, warmup=1)))
    assert not r.passed, r.feedback
    assert r.error is not None and str(getattr(r.error.stage, "value", r.error.stage)) == stage, r.error
    assert reason in r.error.message or reason in str(r.details.get("integrity")), (r.error, r.details.get("integrity"))
    if stage != "compile":
        assert "harness_tampered" in r.hack_reasons, r.hack_reasons
