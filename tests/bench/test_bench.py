"""Tests for drkernel/bench/ and `drkernel bench` on the 3-task mini suite (CPU interpreter).

Real evaluations are kept to 4 (about 2-3 s each): the suite's 3 solutions once, and one wrong
candidate. Environment failures and task errors use a fake grader or a broken task and grade
nothing.
"""

import json
import math
import shutil
import threading
import time
from pathlib import Path

import pytest

import drkernel.env
from drkernel.bench import progress_line, run_bench, summarize
from drkernel.cli import main
from drkernel.env.grader import Grader, GraderBase
from drkernel.env.result import EnvironmentFailure, EvalResult

FIXTURES = Path(__file__).parent / "fixtures"
MINI = FIXTURES / "mini_suite"
WRONG = FIXTURES / "candidates_wrong"


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """The suite's own solutions, graded on cpu (3 evaluations)."""
    out = tmp_path_factory.mktemp("bench_honest")
    report = run_bench(MINI, device="cpu", out=out, seed=0, progress=None)
    return report, out


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    """Through the CLI: a wrong add and no rowsum candidate, --strict (1 evaluation)."""
    out = tmp_path_factory.mktemp("bench_wrong")
    code = main(["bench", "--suite", str(MINI), "--solutions", str(WRONG), "--device", "cpu", "--out", str(out),
                 "--tasks", "add,rowsum", "--seed", "0", "--strict", "--quiet"])
    return code, json.loads((out / "results.json").read_text()), out


@pytest.mark.slow
def test_honest_solutions_pass(honest):
    report, out = honest
    assert [o.status for o in report.outcomes] == ["pass", "pass", "pass"]
    assert report.exit_code(strict=True) == 0
    data = json.loads((out / "results.json").read_text())
    assert set(data) >= {"suite", "device", "versions", "gpu", "config", "summary", "tasks", "environment_failures"}
    assert data["suite"] == "mini_suite-v0" and data["device"] == "cpu" and data["task_size"] == "small"
    assert set(data["versions"]) >= {"torch", "triton"} and data["gpu"] is None
    assert data["config"]["timing_trials"] == 3 and data["config"]["distributions"] == ["native", "negated"]
    assert [t["task"] for t in data["tasks"]] == ["01_relu", "02_add", "03_rowsum"]
    for t in data["tasks"]:
        r = t["result"]
        assert r["passed"] and r["speedup"] > 0 and 0 <= r["coverage"] <= 1 and r["error"] is None
        assert t["candidate"].endswith(f"solutions/{t['task']}.py")
    # summary numbers agree with the per-task results: Fast@p counts s >= p over all graded tasks
    s = data["summary"]
    speedups = [t["result"]["speedup"] for t in data["tasks"]]
    assert (s["tasks"], s["graded"], s["passed"], s["correctness_rate"], s["hack_rate"]) == (3, 3, 3, 1.0, 0.0)
    assert s["fast@1"] == sum(x >= 1.0 for x in speedups) / 3
    assert s["fast@1.2"] == s["fast"]["1.2"] == sum(x >= 1.2 for x in speedups) / 3
    assert s["geomean_speedup"] == pytest.approx(math.exp(sum(math.log(x) for x in speedups) / 3))
    md = (out / "summary.md").read_text()
    assert "| Fast@1.2 |" in md and "| 03_rowsum | yes |" in md
    assert "Triton's interpreter" in md and "nothing about GPU performance" in md  # CPU numbers say what they are
    png = out / "speedups.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_wrong_candidate_and_missing_candidate_fail(wrong):
    code, data, out = wrong
    assert code == 1  # --strict and not everything passed
    tasks = {t["task"]: t for t in data["tasks"]}
    assert set(tasks) == {"02_add", "03_rowsum"}
    add, rowsum = tasks["02_add"], tasks["03_rowsum"]
    assert add["status"] == "fail" and add["result"]["compiled"] and not add["result"]["correct"]
    assert add["result"]["error"]["stage"] == "correctness"
    assert rowsum["status"] == "no_candidate" and rowsum["candidate"] is None
    assert "no candidate" in rowsum["result"]["error"]["message"]
    s = data["summary"]
    assert (s["graded"], s["passed"], s["no_candidate"], s["correctness_rate"], s["fast@1"]) == (2, 0, 1, 0.0, 0.0)
    assert s["geomean_speedup"] is None  # no passing kernel: nan -> null in JSON
    assert data["unmatched_candidates"] == ["04_unknown.py"]
    assert "| 02_add | no | - | - | - | - | correctness |" in (out / "summary.md").read_text()


class FakeGrader(GraderBase):
    """Synthetic verdicts per task name; raises EnvironmentFailure for "02_add". Records the options
    it was sent and the most evaluations it ran at once."""

    def __init__(self, capacity=1, delay=0.0):
        super().__init__(capacity)
        self.closed, self.options, self.delay = False, [], delay
        self.running = self.most_at_once = 0
        self._count = threading.Lock()

    def _grade(self, task, source, *, seed, options):
        with self._count:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(self.delay)
            self.options.append(options)
            if task.name == "02_add":
                raise EnvironmentFailure("worker could not start\nmore detail")
            if task.name == "01_relu":
                return EvalResult(compiled=True, correct=True, speedup=1.2, coverage=0.9, kernel_ms=1.0,
                                  reference_ms=1.2)
            return EvalResult(compiled=True, correct=False)
        finally:
            with self._count:
                self.running -= 1

    def close(self):
        self.closed = True
        super().close()


def test_environment_failure_is_not_a_kernel_failure(tmp_path):
    fake = FakeGrader()
    assert isinstance(fake, Grader)
    report = run_bench(MINI, device="cpu", out=tmp_path, grader=fake, progress=None, plot=False)
    assert [o.status for o in report.outcomes] == ["pass", "environment_failure", "fail"]
    assert report.outcomes[1].message == "EnvironmentFailure: worker could not start"
    s = report.summary
    # graded: relu (pass, s = 1.2) and rowsum (fail); the environment failure is left out
    assert (s["tasks"], s["graded"], s["environment_failures"]) == (3, 2, 1)
    assert s["correctness_rate"] == 0.5 and s["fast@1.2"] == 0.5  # 1.2 >= 1.2 counts
    assert report.exit_code() == 3 and report.exit_code(strict=True) == 3
    assert not fake.closed  # a grader passed in is the caller's to close
    # it grades by the suite's protocol (env.yaml + cpu_fast), sent as options; the device is its own
    assert all(o["timing_trials"] == 3 and o["distributions"] == ["native", "negated"] and "device" not in o
               for o in fake.options) and len(fake.options) == 3
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["environment_failures"] == [{"task": "02_add", "message": "EnvironmentFailure: worker could not start"}]


def test_interrupted_run_keeps_what_it_graded(tmp_path):
    """A run killed half-way (time limit, Ctrl-C) leaves one JSON line per finished task."""

    class Stop(Exception):
        pass

    class DiesOnSecondLine:
        lines = 0

        def write(self, text):
            if text.strip():
                self.lines += 1
                if self.lines == 2:
                    raise Stop

        def flush(self):
            pass

    with pytest.raises(Stop):
        run_bench(MINI, device="cpu", out=tmp_path, grader=FakeGrader(), progress=DiesOnSecondLine(), plot=False)
    lines = [json.loads(x) for x in (tmp_path / "results.partial.jsonl").read_text().splitlines()]
    assert [x["task"] for x in lines] == ["01_relu", "02_add"]  # written before the progress line
    assert lines[0]["status"] == "pass" and lines[0]["result"]["speedup"] == 1.2
    assert not (tmp_path / "results.json").exists()
    # a completed run replaces the partial file with results.json
    run_bench(MINI, device="cpu", out=tmp_path, grader=FakeGrader(), progress=None, plot=False)
    assert (tmp_path / "results.json").is_file() and not (tmp_path / "results.partial.jsonl").exists()


def test_merge_split_runs(tmp_path, capsys):
    """A suite graded in parts (one cut short) merges into one report; the last part wins a task."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    run_bench(MINI, device="cpu", out=a, grader=FakeGrader(), progress=None, plot=False, tasks="01*,02*")
    (a / "results.json").rename(a / "elsewhere.json")  # part a looks cut short: only its partial file
    lines = [{"task": "01_relu", "candidate": None, "status": "pass", "seconds": 1.0, "message": None,
              "result": EvalResult(compiled=True, correct=True, speedup=1.5, coverage=1.0).to_dict()},
             {"task": "02_add", "candidate": None, "status": "environment_failure", "seconds": 0.5,
              "message": "EnvironmentFailure: gone", "result": None}]
    (a / "results.partial.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_bench(MINI, device="cpu", out=b, grader=FakeGrader(), progress=None, plot=False, tasks="03*")
    (c / "results.partial.jsonl").parent.mkdir()
    (c / "results.partial.jsonl").write_text(json.dumps(
        {"task": "02_add", "candidate": None, "status": "pass", "seconds": 2.0, "message": None,
         "result": EvalResult(compiled=True, correct=True, speedup=2.0, coverage=1.0).to_dict()}) + "\n")
    out = tmp_path / "merged"
    code = main(["bench", "--suite", str(MINI), "--merge", str(a), str(b), str(c), "--out", str(out), "--no-plot"])
    data = json.loads((out / "results.json").read_text())
    assert code == 0
    assert [(t["task"], t["status"]) for t in data["tasks"]] == [("01_relu", "pass"), ("02_add", "pass"),
                                                               ("03_rowsum", "fail")]
    s = data["summary"]
    assert (s["graded"], s["passed"], s["environment_failures"]) == (3, 2, 0)
    assert s["geomean_speedup"] == pytest.approx(math.sqrt(1.5 * 2.0))
    assert [m["tasks"] for m in data["merged_from"]] == [["01_relu", "02_add"], ["03_rowsum"], ["02_add"]]
    assert "Fast@1" in capsys.readouterr().out
    with pytest.raises(ValueError, match="neither results.json"):
        from drkernel.bench import merge_reports

        merge_reports(MINI, [tmp_path / "nothing-here"])
    assert main(["bench", "--suite", str(MINI), "--merge", str(a)]) == 2  # --merge needs --out
    for key, value, match in (("suite", "other-v0", "is a run of other-v0"), ("device", "cuda", "device 'cuda'")):
        odd = tmp_path / f"odd_{key}"
        odd.mkdir()
        data = json.loads((b / "results.json").read_text())
        data[key] = value
        (odd / "results.json").write_text(json.dumps(data))
        with pytest.raises(ValueError, match=match):
            merge_reports(MINI, [b, odd])


def test_cli_exit_codes(tmp_path, monkeypatch, capsys):
    assert main(["bench", "--suite", str(tmp_path / "missing")]) == 2
    assert "suite directory not found" in capsys.readouterr().err
    assert main(["bench", "--suite", str(MINI), "--solutions", str(tmp_path / "none"), "--device", "cpu"]) == 2
    assert main(["bench", "--suite", str(MINI), "--tasks", "zzz", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "no task" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["bench", "--suite", str(MINI), "--device", "cuda", "--out", str(tmp_path)]) == 3
        assert "environment failure" in capsys.readouterr().err
    # an environment failure during the run: outputs written, exit 3
    built = []
    monkeypatch.setattr(drkernel.env, "LocalGrader", lambda config, capacity: built.append(FakeGrader(capacity))
                        or built[-1])
    out = tmp_path / "env_fail"
    assert main(["bench", "--suite", str(MINI), "--device", "cpu", "--out", str(out), "--no-plot"]) == 3
    err = capsys.readouterr().err
    assert "ENV-FAIL EnvironmentFailure: worker could not start" in err
    assert "environment failure: 1 task(s)" in err and (out / "results.json").is_file()
    assert [g.closed for g in built] == [True]  # the bench's own grader is closed
    assert all(o == {} for o in built[0].options)  # built from the protocol: no per-call options
    assert main(["bench", "--suite", str(MINI), "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_workers_bound_concurrency(tmp_path):
    fake = FakeGrader(capacity=3, delay=0.3)
    report = run_bench(MINI, device="cpu", grader=fake, progress=None, workers=2)
    assert fake.most_at_once == 2 and len(report.outcomes) == 3
    fake = FakeGrader(capacity=3, delay=0.3)
    run_bench(MINI, device="cpu", grader=fake, progress=None)  # default: the grader's capacity
    assert fake.most_at_once == 3


def test_unusable_task_is_reported_separately(tmp_path, capsys):
    suite = tmp_path / "suite"
    shutil.copytree(MINI, suite)
    (suite / "tasks" / "02_add.py").write_text("raise RuntimeError('broken reference')\n")
    (suite / "solutions" / "01_relu.py").unlink()
    out = tmp_path / "out"
    # relu: no candidate; add: task error; rowsum filtered out -> nothing is evaluated
    assert main(["bench", "--suite", str(suite), "--device", "cpu", "--out", str(out), "--tasks", "relu,add"]) == 2
    captured = capsys.readouterr()
    assert "TASK-ERROR" in captured.err and "1 unusable task(s)" in captured.err
    data = json.loads((out / "results.json").read_text())
    assert [t["status"] for t in data["tasks"]] == ["no_candidate", "task_error"]
    assert data["summary"]["graded"] == 1 and data["summary"]["task_errors"] == 1


def test_progress_line_and_empty_summary():
    from drkernel.bench import TaskOutcome

    r = EvalResult(compiled=True, correct=True, speedup=1.834, coverage=0.971)
    assert progress_line(12, 27, TaskOutcome("05_softmax", None, "pass", r, seconds=2.14)) == \
        "[12/27] 05_softmax PASS 1.83x cov 0.97 (2.1s)"
    bad = EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["no_triton_launch"])
    assert "FAIL hacked: no_triton_launch" in progress_line(1, 1, TaskOutcome("x", None, "fail", bad))
    s = summarize([TaskOutcome("x", None, "environment_failure", message="m")])
    assert s["graded"] == 0 and math.isnan(s["correctness_rate"]) and math.isnan(s["fast@1"])
