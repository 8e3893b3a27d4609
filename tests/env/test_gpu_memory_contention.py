"""A candidate that runs out of GPU memory beside other evaluations is graded again alone.

Device memory is shared by the candidates of one GPU: on an H100 (2026-11-26) an honest kernel
failed a correctness trial with CUDA OOM while memory-hungry candidates ran beside it. LocalGrader
re-grades such a result with the GPU to itself; the second verdict stands. Here the evaluation is
replaced by a fake that runs out of memory whenever another one runs at the same time, so the
scheduling is tested on a machine without a GPU.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from drkernel.env import evaluation
from drkernel.env.config import EvalConfig
from drkernel.env.grader import LocalGrader
from drkernel.env.result import EvalError, EvalResult
from drkernel.env.tasks.task import Task

TASK = Task.from_source('''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
''', name="double")

OOM = "trial 4 (negated inputs): OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB."


class FakeEvaluation:
    """Runs for ``hold`` seconds; fails with CUDA OOM if another one overlapped it (or always, for
    a source containing "HOG")."""

    lock = threading.Lock()
    running = 0
    hold = 0.3

    def __init__(self, prepared, source, **kwargs):
        self.source = source

    def run(self) -> EvalResult:
        cls = FakeEvaluation
        with cls.lock:
            cls.running += 1
            seen = cls.running
        time.sleep(cls.hold)
        with cls.lock:
            seen = max(seen, cls.running)
            cls.running -= 1
        if "HOG" in self.source or seen > 1:
            return EvalResult(compiled=True, correct=False, error=EvalError("correctness", OOM))
        return EvalResult(compiled=True, correct=True)


@pytest.fixture
def grader(monkeypatch):
    monkeypatch.setattr(evaluation, "Evaluation", FakeEvaluation)
    FakeEvaluation.running = 0
    g = LocalGrader(EvalConfig(device="cpu"), devices=["cuda:0"], capacity=4, warm=False)
    yield g
    g.close()


def test_oom_beside_others_is_graded_again_alone_and_passes(grader):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: grader.grade(TASK, f"candidate {i}", seed=i), range(4)))
    assert all(r.correct for r in results), [r.error for r in results]
    retried = [r for r in results if "retried_alone" in r.details]
    assert retried and grader.solo_retries == len(retried)
    assert all("CUDA out of memory" in r.details["retried_alone"]["first_error"] for r in retried)


def test_a_candidate_that_runs_out_of_memory_alone_keeps_its_verdict(grader):
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(grader.grade, TASK, "HOG", seed=0)] + \
                  [pool.submit(grader.grade, TASK, f"honest {i}", seed=i) for i in range(2)]
        hog, *honest = [f.result() for f in futures]
    assert not hog.correct and "CUDA out of memory" in hog.error.message
    assert "retried_alone" in hog.details  # it had company the first time; alone it failed again
    assert all(r.correct for r in honest)


def test_no_retry_without_company(grader):
    r = grader.grade(TASK, "HOG", seed=0)
    assert not r.correct and "retried_alone" not in r.details and grader.solo_retries == 0


def test_no_retry_on_cpu(monkeypatch):
    monkeypatch.setattr(evaluation, "Evaluation", FakeEvaluation)
    FakeEvaluation.running = 0
    with LocalGrader(EvalConfig(device="cpu"), capacity=2, warm=False) as g:
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda i: g.grade(TASK, f"c {i}", seed=i), range(2)))
    assert g.solo_retries == 0 and all("retried_alone" not in r.details for r in results)
