"""Suite benchmark: grade a directory of candidates against every task of a suite.

``drkernel bench --suite envs/single_ops`` grades the suite's own ``solutions/``;
``--solutions DIR`` grades someone else's (a candidate's file name is its task's file name, and a
task without one fails as "no candidate"). Writes, under ``--out``:

* ``results.json``: suite, device, versions, the EvalConfig used, the summary, and per task
  ``{task, candidate, status, result: EvalResult.to_dict()}``;
* ``summary.md``: the summary table and a per-task table;
* ``speedups.png``: per-task speedups on a log scale with lines at 1.0 and 1.2 (failures marked);
* ``results.partial.jsonl`` while the run is going: one outcome per line as each task finishes, so
  an interrupted run (a killed job, a time limit) keeps what it graded. Removed once results.json
  is written.

Summary metrics (over graded tasks, i.e. all tasks except environment failures and task errors;
"no candidate" counts as a failed kernel), computed by :func:`drkernel.metrics.kernel_metrics`
with one turn per task:

* ``correctness_rate`` = #pass / #graded, where pass = compiled and correct and not hacked;
* ``fast@p`` = #(pass and speedup >= p) / #graded: the paper's Fast@p (``>=``, as Dr. Kernel);
* ``geomean_speedup`` = exp(mean log s) over passing kernels;
* ``hack_rate`` = #hacked / #graded.

Environment failures (:class:`~drkernel.env.result.EnvironmentFailure`: the grader could not run)
are never counted as kernel failures: they are listed separately and make the CLI exit 3.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from drkernel.env.config import EvalConfig
from drkernel.env.result import EnvironmentFailure, EvalError, EvalResult
from drkernel.env.suite import Suite, SuiteTask, load_suite
from drkernel.env.task import Task, TaskError

#: Outcome statuses. Only the first three are kernel verdicts.
PASS, FAIL, NO_CANDIDATE, ENV_FAILURE, TASK_ERROR = "pass", "fail", "no_candidate", "environment_failure", "task_error"
GRADED = (PASS, FAIL, NO_CANDIDATE)
REPORTED_FAST = (1.0, 1.2)
"""Fast@p thresholds in the printed table (results.json has all of metrics.FAST_THRESHOLDS)."""
PARTIAL_NAME = "results.partial.jsonl"


@dataclass
class TaskOutcome:
    """What happened to one task of the bench."""

    task: str
    """Task id (file stem)."""
    candidate: Path | None
    """The graded file; None when there was none."""
    status: str
    """``pass``, ``fail``, ``no_candidate``, ``environment_failure`` or ``task_error``."""
    result: EvalResult | None = None
    """The verdict (also a synthetic failed result for ``no_candidate``); None otherwise."""
    message: str | None = None
    """Why, for ``environment_failure`` and ``task_error``."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "candidate": str(self.candidate) if self.candidate else None,
                "status": self.status, "seconds": round(self.seconds, 3), "message": self.message,
                "result": self.result.to_dict() if self.result else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskOutcome":
        """Inverse of :meth:`to_dict` (a results.json task entry or a results.partial.jsonl line)."""
        return cls(data["task"], Path(data["candidate"]) if data.get("candidate") else None, data["status"],
                   EvalResult.from_dict(data["result"]) if data.get("result") else None, data.get("message"),
                   float(data.get("seconds") or 0.0))


@dataclass
class BenchReport:
    suite: Suite
    device: str
    config: EvalConfig
    solutions_dir: Path
    seed: int | None
    outcomes: list[TaskOutcome] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    unmatched_candidates: list[str] = field(default_factory=list)
    """Files in the solutions directory whose name matches no task (likely misnamed)."""
    out_dir: Path | None = None
    wall_seconds: float = 0.0
    merged_from: list[dict[str, Any]] | None = None
    """For a merged report: each part's directory, versions, GPU and CPU (where it ran)."""

    def by_status(self, status: str) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def all_passed(self) -> bool:
        return bool(self.outcomes) and all(o.status == PASS for o in self.outcomes)

    def exit_code(self, strict: bool = False) -> int:
        """3 on any environment failure, 2 on an unusable task, 1 if ``strict`` and a task did not pass."""
        if self.by_status(ENV_FAILURE):
            return 3
        if self.by_status(TASK_ERROR):
            return 2
        if strict and not self.all_passed:
            return 1
        return 0


# -- grading -------------------------------------------------------------------------------------

def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _no_candidate(message: str) -> EvalResult:
    from drkernel.env.feedback import build_feedback

    result = EvalResult(error=EvalError("load", message))
    result.feedback = build_feedback(result)
    return result


def _verdict(result: EvalResult) -> str:
    return PASS if result.passed else FAIL


def run_bench(suite: Suite | str | os.PathLike, *, solutions: str | os.PathLike | None = None,
              device: str | None = None, out: str | os.PathLike | None = None, workers: int = 1,
              seed: int | None = None, tasks: str | None = None, size: str | None = None,
              overrides: dict[str, Any] | None = None, executor: Any = None, progress: IO[str] | None = sys.stderr,
              plot: bool = True) -> BenchReport:
    """Grade ``solutions`` (default: the suite's ``solutions/``) against ``suite`` and write the report.

    Args:
        suite: a :class:`Suite` or its directory.
        solutions: directory of candidate files named like the tasks.
        device: ``cpu`` or ``cuda`` (default: cuda if available).
        out: output directory (created); None writes nothing.
        workers: concurrent evaluations (>1 uses the ``pool`` executor).
        seed: master seed of every evaluation (None: hidden seeds from the OS).
        tasks: task filter, see :meth:`Suite.select`.
        size: ``small`` or ``full`` (default: small on cpu, full on cuda).
        overrides: extra EvalConfig fields.
        executor: a Grader (``grade(task, source, *, seed)``) to use instead of building a
            LocalGrader (tests, remote graders); the caller closes it.
        progress: stream for one line per finished task; None is silent.
        plot: write speedups.png (skipped with a warning if matplotlib is missing).

    Raises:
        SuiteError: unusable suite; ValueError: bad arguments; EnvironmentFailure: CUDA asked for
        and not available.
    """
    t_start = time.monotonic()
    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    device = device or default_device()
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentFailure(f"device {device!r} requested but torch.cuda.is_available() is False")
    config = suite.eval_config(device=device, task_size=size, **(overrides or {}))
    solutions_dir = Path(solutions) if solutions is not None else suite.solutions_dir
    if not solutions_dir.is_dir():
        raise ValueError(f"solutions directory not found: {solutions_dir}"
                         + ("" if solutions is not None else " (the suite has no solutions/: pass --solutions DIR)"))
    selected = suite.select(tasks)
    if not selected:
        raise ValueError(f"no task of suite {suite.id} matches {tasks!r}")
    report = BenchReport(suite=suite, device=device, config=config, solutions_dir=solutions_dir.resolve(), seed=seed)
    task_names = {t.filename for t in suite.tasks}
    report.unmatched_candidates = sorted(p.name for p in solutions_dir.glob("*.py")
                                         if p.name not in task_names and not p.name.startswith("_"))

    outcomes: dict[str, TaskOutcome] = {}
    n_total, done = len(selected), 0
    partial = None
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        partial = Path(out) / PARTIAL_NAME
        partial.write_text("", encoding="utf-8")

    def record(o: TaskOutcome) -> None:
        nonlocal done
        done += 1
        outcomes[o.task] = o
        if partial is not None:
            with partial.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(_jsonable(o.to_dict())) + "\n")
        if progress is not None:
            print(progress_line(done, n_total, o, width=max(len(t.id) for t in selected)), file=progress, flush=True)

    jobs: list[tuple[SuiteTask, Task, Path, str]] = []
    for st in selected:
        cand = solutions_dir / st.filename
        try:
            task = st.task(suite.entry_point)
            task.load(config.resolved_task_size())  # an unusable reference is the suite's fault, not the kernel's
        except TaskError as exc:
            record(TaskOutcome(st.id, None, TASK_ERROR, message=str(exc).splitlines()[0]))
            continue
        if not cand.is_file():
            record(TaskOutcome(st.id, None, NO_CANDIDATE, _no_candidate(f"no candidate: {cand.name} not found")))
            continue
        try:
            source = cand.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            record(TaskOutcome(st.id, cand, FAIL, _no_candidate(f"unreadable candidate {cand.name}: {exc}")))
            continue
        jobs.append((st, task, cand, source))

    own_executor = executor is None
    if own_executor and jobs:
        from drkernel.env.grader import LocalGrader

        executor = LocalGrader(config, capacity=max(1, workers))
    try:
        for st, cand, result, exc, seconds in _grade(executor, jobs, seed, max(1, workers)):
            if exc is None:
                record(TaskOutcome(st.id, cand, _verdict(result), result, seconds=seconds))
            elif isinstance(exc, TaskError):
                record(TaskOutcome(st.id, cand, TASK_ERROR, message=str(exc).splitlines()[0], seconds=seconds))
            else:  # EnvironmentFailure, or a grader bug: never the kernel's fault
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                record(TaskOutcome(st.id, cand, ENV_FAILURE, message=f"{type(exc).__name__}: {msg}", seconds=seconds))
    finally:
        if own_executor and executor is not None:
            executor.close()

    report.outcomes = [outcomes[t.id] for t in selected]
    report.summary = summarize(report.outcomes)
    report.wall_seconds = time.monotonic() - t_start
    if out is not None:
        write_report(report, out, plot=plot)
        partial.unlink(missing_ok=True)
    return report


def read_outcomes(part: str | os.PathLike) -> tuple[dict[str, Any], list[TaskOutcome]]:
    """Outcomes of one earlier run: its ``results.json``, or ``results.partial.jsonl`` if it was cut
    short. Returns (run metadata, outcomes); the metadata is empty for a partial run."""
    part = Path(part)
    full, partial = part / "results.json", part / PARTIAL_NAME
    if full.is_file():
        data = json.loads(full.read_text(encoding="utf-8"))
        rows = data.get("tasks", [])
    elif partial.is_file():
        data = {}
        rows = [json.loads(line) for line in partial.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        raise ValueError(f"{part} holds neither results.json nor {PARTIAL_NAME}")
    return data, [TaskOutcome.from_dict(row) for row in rows]


def merge_reports(suite: Suite | str | os.PathLike, parts: list[str | os.PathLike], *,
                  out: str | os.PathLike | None = None, plot: bool = True) -> BenchReport:
    """One report from several runs of the same suite (a long suite split over time-limited jobs,
    or a task re-run). A task graded in several parts keeps its outcome from the *last* part.

    Raises:
        ValueError: a part with no results, parts for other suites or devices.
    """
    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    if not parts:
        raise ValueError("nothing to merge: no part directories given")
    by_task: dict[str, TaskOutcome] = {}
    meta: dict[str, Any] = {}
    origins: list[dict[str, Any]] = []
    for part in parts:
        data, outcomes = read_outcomes(part)
        origins.append({"part": str(part), "tasks": [o.task for o in outcomes],
                        **{k: data.get(k) for k in ("versions", "gpu", "cpu")}})
        if data.get("suite") not in (None, suite.id):
            raise ValueError(f"{part} is a run of {data['suite']}, not {suite.id}")
        if None not in (data.get("device"), meta.get("device")) and data["device"] != meta["device"]:
            raise ValueError(f"{part}: device {data['device']!r} differs from an earlier part's {meta['device']!r}")
        meta.update({k: v for k, v in data.items() if v is not None})
        by_task.update({o.task: o for o in outcomes})
    device = meta.get("device") or "cuda"
    config = suite.eval_config(device=device, task_size=meta.get("task_size"))
    report = BenchReport(suite=suite, device=device, config=config,
                         solutions_dir=Path(meta.get("solutions") or parts[-1]), seed=meta.get("seed"))
    report.outcomes = [by_task[t.id] for t in suite.tasks if t.id in by_task]
    report.summary = summarize(report.outcomes)
    report.wall_seconds = sum(o.seconds for o in report.outcomes)
    report.merged_from = origins
    if out is not None:
        write_report(report, out, plot=plot)
    return report


def _grade(executor: Any, jobs: list[tuple[SuiteTask, Task, Path, str]], seed: int | None, workers: int):
    """Yield ``(suite_task, candidate_path, result | None, exception | None, seconds)`` in completion
    order. Each job goes through ``grader.grade`` on its own thread, timed here, so that a job
    that ends in an EnvironmentFailure is reported alone and still has its seconds."""
    if not jobs:
        return

    def one(task: Task, source: str) -> tuple[EvalResult | None, BaseException | None, float]:
        t0 = time.monotonic()
        try:
            return executor.grade(task, source, seed=seed), None, time.monotonic() - t0
        except Exception as exc:  # noqa: BLE001 - reported per task, see the caller
            return None, exc, time.monotonic() - t0

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drkernel-bench") as pool:
        futures = {pool.submit(one, task, source): (st, cand) for st, task, cand, source in jobs}
        for fut in as_completed(futures):
            st, cand = futures[fut]
            result, exc, seconds = fut.result()
            yield st, cand, result, exc, seconds


def progress_line(i: int, n: int, o: TaskOutcome, width: int = 0) -> str:
    """``[12/27] 05_softmax  PASS 1.83x cov 0.97 (2.1s)``."""
    head = f"[{i:>{len(str(n))}}/{n}] {o.task:<{width}}"
    r = o.result
    if o.status == PASS and r is not None:
        speed = f"{r.speedup:.3g}x" if r.speedup is not None else "-"
        cov = f" cov {r.coverage:.2f}" if r.coverage is not None else ""
        return f"{head} PASS {speed}{cov} ({o.seconds:.1f}s)"
    if o.status == NO_CANDIDATE:
        return f"{head} FAIL no candidate"
    if o.status == ENV_FAILURE:
        return f"{head} ENV-FAIL {o.message} ({o.seconds:.1f}s)"
    if o.status == TASK_ERROR:
        return f"{head} TASK-ERROR {o.message}"
    return f"{head} FAIL {_why(r)} ({o.seconds:.1f}s)"


def _why(r: EvalResult | None) -> str:
    if r is None:
        return "-"
    if r.hack_reasons:
        return "hacked: " + ",".join(r.hack_reasons)
    if r.error is not None:
        return r.error.stage
    return "incorrect"


# -- summary -------------------------------------------------------------------------------------

def summarize(outcomes: list[TaskOutcome]) -> dict[str, Any]:
    """Suite-level numbers (module doc); rates are nan when nothing was graded."""
    import torch

    from drkernel.metrics.kernel import FAST_THRESHOLDS, kernel_metrics

    graded = [o for o in outcomes if o.status in GRADED and o.result is not None]
    n = len(graded)
    summary: dict[str, Any] = {
        "tasks": len(outcomes), "graded": n, "passed": sum(o.status == PASS for o in graded),
        "compiled": sum(o.result.compiled for o in graded), "hacked": sum(o.result.hacked for o in graded),
        "no_candidate": sum(o.status == NO_CANDIDATE for o in graded),
        "environment_failures": sum(o.status == ENV_FAILURE for o in outcomes),
        "task_errors": sum(o.status == TASK_ERROR for o in outcomes),
    }
    nan = float("nan")
    if n == 0:
        summary.update({"correctness_rate": nan, "geomean_speedup": nan, "hack_rate": nan,
                        "fast": {f"{p:g}": nan for p in FAST_THRESHOLDS}})
    else:
        # one turn per task: (N, 1) tensors
        correct = torch.tensor([[o.result.compiled and o.result.correct] for o in graded], dtype=torch.bool)
        speedup = torch.tensor([[o.result.speedup if o.result.speedup is not None else nan] for o in graded],
                               dtype=torch.float64)
        hacked = torch.tensor([[o.result.hacked] for o in graded], dtype=torch.bool)
        m = kernel_metrics(correct, speedup, hacked, thresholds=FAST_THRESHOLDS, prefix="bench")
        summary.update({
            "correctness_rate": m["bench/turn_1/correctness_rate"],
            "geomean_speedup": m["bench/turn_1/geomean_speedup"],
            "hack_rate": m["bench/turn_1/hack_rate"],
            "fast": {f"{p:g}": m[f"bench/turn_1/fast@{p:g}_in_all"] for p in FAST_THRESHOLDS},
        })
    for p in REPORTED_FAST:
        summary[f"fast@{p:g}"] = summary["fast"][f"{p:g}"]
    return summary


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3g", suffix: str = "") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:{fmt}}{suffix}"


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    g = s["graded"]
    rows = [
        ("tasks", str(s["tasks"])),
        ("graded", str(g)),
        ("correctness rate (pass)", f"{_pct(s['correctness_rate'])} ({s['passed']}/{g})"),
    ]
    rows += [(f"Fast@{p:g}", _pct(s[f"fast@{p:g}"])) for p in REPORTED_FAST]
    rows += [
        ("geomean speedup (passing)", _num(s["geomean_speedup"], ".3g", "x")),
        ("hack rate", f"{_pct(s['hack_rate'])} ({s['hacked']}/{g})"),
        ("compiled", f"{s['compiled']}/{g}"),
        ("no candidate", str(s["no_candidate"])),
        ("environment failures (not graded)", str(s["environment_failures"])),
        ("task errors (not graded)", str(s["task_errors"])),
    ]
    return rows


def format_summary(report: BenchReport) -> str:
    """Plain-text summary table for the terminal."""
    rows = summary_rows(report.summary)
    w = max(len(k) for k, _ in rows)
    lines = [f"{report.suite.id} on {report.device} (size {report.config.resolved_task_size()}, "
             f"{report.wall_seconds:.1f}s)"]
    lines += [f"  {k:<{w}}  {v}" for k, v in rows]
    for o in report.by_status(ENV_FAILURE):
        lines.append(f"  environment failure: {o.task}: {o.message}")
    for o in report.by_status(TASK_ERROR):
        lines.append(f"  task error: {o.task}: {o.message}")
    if report.unmatched_candidates:
        lines.append(f"  candidates matching no task: {', '.join(report.unmatched_candidates)}")
    return "\n".join(lines)


def _task_row(o: TaskOutcome) -> list[str]:
    r = o.result
    if o.status in (ENV_FAILURE, TASK_ERROR):
        return [o.task, o.status.replace("_", " "), "-", "-", "-", "-", o.message or ""]
    note = "no candidate" if o.status == NO_CANDIDATE else ("" if o.status == PASS else _why(r))
    return [o.task, "yes" if o.status == PASS else "no", _num(r.speedup, ".3g", "x"), _num(r.coverage, ".2f"),
            _num(r.kernel_ms, ".4g"), _num(r.reference_ms, ".4g"), note]


def format_markdown(report: BenchReport) -> str:
    cfg = report.config
    lines = [f"# Bench: {report.suite.id} on {report.device}", "",
             f"Solutions `{report.solutions_dir}`; size {cfg.resolved_task_size()}; seed {report.seed}; "
             f"{cfg.trials_per_distribution} trial(s) x {len(cfg.distributions)} distribution(s); "
             f"timing {cfg.warmup} warm-up + {cfg.timing_trials} calls, reference {cfg.reference_backend}.", "",
             *([f"Merged from {len(report.merged_from)} runs (`drkernel bench --merge`): "
                + "; ".join(f"`{Path(m['part']).name}` ({len(m['tasks'])} tasks)" for m in report.merged_from)
                + ". A task graded in several keeps the last run's outcome.", ""] if report.merged_from else []),
             "| metric | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(report.summary)]
    lines += ["", "| task | pass | speedup | coverage | kernel_ms | reference_ms | error stage |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in report.outcomes:
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in _task_row(o)) + " |")
    if report.unmatched_candidates:
        lines += ["", "Candidates matching no task: " + ", ".join(f"`{n}`" for n in report.unmatched_candidates)]
    return "\n".join(lines) + "\n"


# -- output --------------------------------------------------------------------------------------

def _jsonable(x: Any) -> Any:
    """Strict JSON: non-finite floats become null, paths strings."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


def environment_info(device: str) -> dict[str, Any]:
    import torch

    import drkernel

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = None
    gpu = None
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = int(device.split(":")[1]) if ":" in device else 0
        gpu = torch.cuda.get_device_name(idx)
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
            "drkernel": drkernel.__version__, "gpu": gpu, "cpu": platform.processor() or platform.machine()}


def results_dict(report: BenchReport) -> dict[str, Any]:
    if report.merged_from:  # where the parts ran, not where they were merged
        last = report.merged_from[-1]
        info = {"python": None, "torch": None, "triton": None, "drkernel": None, "gpu": last.get("gpu"),
                "cpu": last.get("cpu"), **(last.get("versions") or {})}
    else:
        info = environment_info(report.device)
    return _jsonable({
        "suite": report.suite.id, "suite_path": report.suite.root, "device": report.device,
        "task_size": report.config.resolved_task_size(), "seed": report.seed, "solutions": report.solutions_dir,
        "versions": {k: info[k] for k in ("python", "torch", "triton", "drkernel")}, "gpu": info["gpu"],
        "cpu": info["cpu"], "config": dataclasses.asdict(report.config), "wall_seconds": round(report.wall_seconds, 3),
        "summary": report.summary,
        "environment_failures": [{"task": o.task, "message": o.message} for o in report.by_status(ENV_FAILURE)],
        "task_errors": [{"task": o.task, "message": o.message} for o in report.by_status(TASK_ERROR)],
        "unmatched_candidates": report.unmatched_candidates,
        "tasks": [o.to_dict() for o in report.outcomes],
        **({"merged_from": report.merged_from} if report.merged_from else {}),
    })


def plot_speedups(report: BenchReport, path: str | os.PathLike) -> Path:
    """Per-task speedup bars (log scale), lines at 1.0 and 1.2; failed tasks as red crosses at the floor."""
    from drkernel.data._deps import require

    matplotlib = require("matplotlib", "the speedup plot")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = [o.task for o in report.outcomes]
    speeds = [o.result.speedup if o.status == PASS and o.result and o.result.speedup else None
              for o in report.outcomes]
    good = [s for s in speeds if s]
    lo, hi = min(good + [1.0]), max(good + [1.2])
    floor = lo / 4
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(names) + 2), 4.5))
    xs = range(len(names))
    colors = ["tab:green" if s and s >= 1.2 else "tab:blue" if s and s >= 1.0 else "tab:orange" for s in speeds]
    ok = [i for i, s in enumerate(speeds) if s]
    ax.bar(ok, [speeds[i] for i in ok], color=[colors[i] for i in ok], width=0.7)
    fails = [i for i, s in enumerate(speeds) if not s]
    if fails:
        ax.scatter(fails, [floor * 1.3] * len(fails), marker="x", color="tab:red", zorder=3,
                   label="failed (speedup 0)")
    ax.set_yscale("log")
    ax.set_ylim(floor, hi * 2)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="-", label="1.0x")
    ax.axhline(1.2, color="gray", linewidth=1, linestyle="--", label="1.2x")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=75, ha="right", fontsize=8)
    ax.set_ylabel("speedup (reference / kernel)")
    s = report.summary
    ax.set_title(f"{report.suite.id} on {report.device}: pass {_pct(s['correctness_rate'])}, "
                 f"Fast@1 {_pct(s['fast@1'])}, Fast@1.2 {_pct(s['fast@1.2'])}", fontsize=10)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(report: BenchReport, out: str | os.PathLike, *, plot: bool = True) -> Path:
    """results.json, summary.md and (if ``plot`` and matplotlib is installed) speedups.png under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.out_dir = out
    (out / "results.json").write_text(json.dumps(results_dict(report), indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(format_markdown(report), encoding="utf-8")
    if plot:
        from drkernel.data._deps import MissingDependency

        try:
            plot_speedups(report, out / "speedups.png")
        except MissingDependency as exc:
            print(f"drkernel: warning: speedups.png not written: {exc}", file=sys.stderr)
    return out


__all__ = ["run_bench", "merge_reports", "read_outcomes", "BenchReport", "TaskOutcome", "summarize",
           "format_summary", "format_markdown", "write_report", "plot_speedups", "results_dict", "progress_line",
           "default_device"]
