"""The grader's adversarial corpus (tests/env/fixtures/manifest.yaml): honest kernels pass, subtly
wrong kernels fail correctness, every reward hack of peers-and-hacks.md §2 that can be shown on
this device is caught, and compile failures are reported as such.

Device: ``DRKERNEL_TEST_DEVICE`` (``cpu`` by default: the Triton interpreter; tests/gpu/run.sh runs
the same corpus with ``cuda``, including the ``gpu_only`` entries).
"""

import os
from pathlib import Path

import pytest
import yaml

from drkernel.env.config import EvalConfig, cpu_fast
from drkernel.env.grader import LocalGrader
from drkernel.env.tasks.task import Task

FIX = Path(__file__).parent / "fixtures"
MANIFEST = yaml.safe_load((FIX / "manifest.yaml").read_text())
DEVICE = os.environ.get("DRKERNEL_TEST_DEVICE", "cpu")
ENTRIES = [e for e in MANIFEST if DEVICE != "cpu" or not e.get("gpu_only")]


def _config() -> EvalConfig:
    if DEVICE == "cpu":
        return cpu_fast(EvalConfig(device="cpu"))
    return EvalConfig(device=DEVICE, timing_trials=10, warmup=2)


# The fast lane (-m "not slow") grades one fixture of each kind; the full run grades them all.
FAST = {"honest/relu_basic.py", "wrong/add_mask_off_by_one.py", "compile/syntax_error.py",
        "hacks/pytorch_fallback.py", "hacks/patch_timers.py"}


@pytest.fixture(scope="module")
def grader():
    """One warm LocalGrader for the corpus: spare processes start while the previous fixture is
    graded (each candidate still gets a process of its own)."""
    with LocalGrader(_config(), capacity=1, spares=2) as g:
        yield g


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["candidate"], marks=() if e["candidate"] in FAST
                                                else pytest.mark.slow) for e in ENTRIES])
def test_fixture_verdict(entry, grader):
    task = Task.from_file(FIX / "tasks" / entry["task"])
    r = grader.grade(task, (FIX / "candidates" / entry["candidate"]).read_text(), seed=20261122)
    expect = entry["expect"]
    summary = (f"compiled={r.compiled} correct={r.correct} hacked={r.hacked} reasons={r.hack_reasons} "
               f"error={r.error}\nfeedback:\n{r.feedback}")
    for key in ("compiled", "correct", "hacked"):
        if key in expect:
            assert getattr(r, key) == expect[key], f"{key}: expected {expect[key]}\n{summary}"
    if expect.get("hack_reasons_any"):
        assert set(expect["hack_reasons_any"]) & set(r.hack_reasons), summary
    if expect.get("compiled") is False:
        assert r.error is not None and r.error.stage == "compile", summary
    if expect.get("hack_reasons_allowed") and r.hacked:
        assert set(expect["hack_reasons_allowed"]) & set(r.hack_reasons), summary
    if "passes" in expect:
        assert r.passed == expect["passes"], summary
    if "error_stage" in expect:
        assert r.error is not None and r.error.stage == expect["error_stage"], summary
    if "coverage_max" in expect:  # a torch fallback: low coverage, or none with the reason (CPU, defect 9)
        assert (r.coverage is not None and r.coverage <= expect["coverage_max"]) or (
            r.coverage is None and (r.details.get("profile") or {}).get("reason")), summary
    if r.passed:
        assert r.speedup is not None
        assert r.coverage is not None or (r.details.get("profile") or {}).get("reason"), summary
    assert r.feedback  # every verdict comes with feedback for the model


def test_manifest_covers_every_fixture_file():
    listed = {e["candidate"] for e in MANIFEST}
    on_disk = {str(p.relative_to(FIX / "candidates")) for p in (FIX / "candidates").rglob("*.py")}
    assert on_disk == listed, (on_disk - listed, listed - on_disk)
