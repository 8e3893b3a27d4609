"""The GPU diagnostics' summarisers on hand-made inputs (they run on the device; their arithmetic
is checked here): tests/benchmarks/diagnostics/grader_host_scaling.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "benchmarks" / "diagnostics" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LOG_ONE = """drkernel from /x/drkernel
  [cap 4] 01_relu                  PASS   2.00s  process_start=1.00 correctness=0.50
  [cap 4] 13_softmax               FAIL   4.00s  correctness=1.50 transfers=0.25
capacity 4: 60.0 evaluations/min, 1/2 passed, spread median 0.1% max 0.2% (x), 0 timed without the launch budget's hold
"""
LOG_TWO = """  [cap 4] 01_relu                  PASS   3.00s  correctness=0.50 stage_map=bad
capacity 4: 30.0 evaluations/min, 1/1 passed
"""
VMSTAT = """procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu-----
 r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st
99  0      0 100000  1000  20000    0    0     0     0    0    0 50 50  0  0  0
 2  0      0 100000  1000  20000    0    0     0     0  100  200  4  2 94  0  0
 6  0      0 100000  1000  20000    0    0     0     0  100  200  8  6 86  0  0
"""


def test_host_scaling_summary_means_per_evaluation_over_every_gpu_of_an_arm(tmp_path, capsys) -> None:
    hs = _module("grader_host_scaling")
    (tmp_path / "alone.gpu0.log").write_text(LOG_ONE)
    (tmp_path / "all2.gpu0.log").write_text(LOG_ONE)
    (tmp_path / "all2.gpu1.log").write_text(LOG_TWO)
    (tmp_path / "all2.vmstat").write_text(VMSTAT)
    totals, stages, rates, failed = hs.parse_log(LOG_TWO)
    assert totals == [3.0] and dict(stages) == {"correctness": 0.5} and rates == [30.0] and failed == 0
    # vmstat: the first data row (since boot) is left out
    assert hs.vmstat_means(VMSTAT) == {"r": 4.0, "us": 6.0, "sy": 4.0, "id": 90.0, "wa": 0.0}
    assert hs.main(str(tmp_path)) == 0
    out = capsys.readouterr().out
    # alone: 2 evaluations, one failed; all2: 3 evaluations, the rate is the mean over the GPUs' logs
    assert "**alone**: 1 GPU(s), 2 evaluations (1 failed), 60.0 evaluations/min per GPU" in out
    assert "**all2**: 2 GPU(s), 3 evaluations (1 failed), 45.0 evaluations/min per GPU; host CPU r 4.0" in out
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| stage")}
    assert rows["TOTAL"] == ["3.00", "3.00"]           # (2 + 4) / 2 alone; (2 + 4 + 3) / 3 on two GPUs
    assert rows["correctness"] == ["1.00", "0.83"]     # (0.5 + 1.5) / 2; (0.5 + 1.5 + 0.5) / 3
    assert rows["process_start"] == ["0.50", "0.33"]
    assert rows["transfers"] == ["0.12", "0.08"]


def test_host_scaling_summary_says_when_there_is_nothing(tmp_path) -> None:
    assert _module("grader_host_scaling").main(str(tmp_path)) == 1
