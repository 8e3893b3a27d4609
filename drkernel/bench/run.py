"""Running a bench: pick the tasks, read the candidates, grade them through a :class:`~drkernel.env.Grader`.

``run_bench`` reads top to bottom: load the suite and its protocol, match candidate files to tasks,
sort out what cannot be graded (an unusable reference is a task error, a missing file is "no
candidate"), grade the rest concurrently with ``grader.agrade``, and record each outcome the
moment it finishes (a line in ``results.partial.jsonl`` and a progress line), so a run that is
killed half-way keeps what it graded. Environment failures
(:class:`~drkernel.env.result.EnvironmentFailure`: the grader could not run) are never counted as
kernel failures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from drkernel.bench.outcomes import (ENV_FAILURE, FAIL, NO_CANDIDATE, PARTIAL_NAME, PASS, TASK_ERROR, BenchReport,
                                     TaskOutcome, summarize)
from drkernel.bench.report import jsonable, progress_line, write_report
from drkernel.env.config import EvalConfig
from drkernel.env.result import EnvironmentFailure, EvalError, EvalResult
from drkernel.env.tasks.suite import Suite, load_suite
from drkernel.env.tasks.task import Task, TaskError


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Job:
    """One candidate to grade."""

    task_id: str
    task: Task
    candidate: Path
    source: str


def protocol_options(config: EvalConfig) -> dict[str, Any]:
    """The suite's protocol as Grader ``options`` (JSON-serialisable EvalConfig fields, all but the
    device, which belongs to the grader): sent to a grader passed in, so it grades by the suite's rules."""
    fields = dataclasses.asdict(config)
    fields.pop("device", None)
    return jsonable(fields)


def _no_candidate(message: str) -> EvalResult:
    from drkernel.env.judge.feedback import build_feedback

    result = EvalResult(error=EvalError("load", message))
    result.feedback = build_feedback(result)
    return result


class _Recorder:
    """Keeps the outcomes, appends each to the partial file and prints its progress line."""

    def __init__(self, n_total: int, width: int, partial: Path | None, progress: IO[str] | None):
        self.outcomes: dict[str, TaskOutcome] = {}
        self.n_total, self.width, self.partial, self.progress = n_total, width, partial, progress

    def __call__(self, o: TaskOutcome) -> None:
        self.outcomes[o.task] = o
        if self.partial is not None:  # before the progress line: a dying stream loses nothing
            with self.partial.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(jsonable(o.to_dict())) + "\n")
        if self.progress is not None:
            print(progress_line(len(self.outcomes), self.n_total, o, width=self.width), file=self.progress, flush=True)


def _outcome(job: Job, result: EvalResult | None, exc: BaseException | None, seconds: float) -> TaskOutcome:
    if exc is None:
        return TaskOutcome(job.task_id, job.candidate, PASS if result.passed else FAIL, result, seconds=seconds)
    if isinstance(exc, TaskError):
        return TaskOutcome(job.task_id, job.candidate, TASK_ERROR, message=str(exc).splitlines()[0], seconds=seconds)
    # EnvironmentFailure, or a grader bug: never the kernel's fault
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else ""
    return TaskOutcome(job.task_id, job.candidate, ENV_FAILURE, message=f"{type(exc).__name__}: {msg}",
                       seconds=seconds)


async def grade_jobs(grader: Any, jobs: list[Job], *, seed: int | None, options: dict[str, Any] | None,
                     concurrency: int, on_done: Callable[[TaskOutcome], None]) -> None:
    """Grade ``jobs`` with ``grader.agrade``, at most ``concurrency`` at once, calling ``on_done``
    with each outcome in completion order. A job's exception becomes its outcome (one failure never
    stops the others); an exception from ``on_done`` cancels the jobs not yet finished."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(job: Job) -> TaskOutcome:
        async with gate:
            t0 = time.monotonic()
            try:
                result = await grader.agrade(job.task, job.source, seed=seed, options=options)
            except Exception as exc:  # noqa: BLE001 - reported per task, see _outcome
                return _outcome(job, None, exc, time.monotonic() - t0)
            return _outcome(job, result, None, time.monotonic() - t0)

    pending = [asyncio.ensure_future(one(job)) for job in jobs]
    try:
        for fut in asyncio.as_completed(pending):
            on_done(await fut)
    finally:
        for fut in pending:
            fut.cancel()


def run_bench(suite: Suite | str | os.PathLike, *, solutions: str | os.PathLike | None = None,
              device: str | None = None, out: str | os.PathLike | None = None, workers: int | None = None,
              seed: int | None = None, tasks: str | None = None, size: str | None = None,
              overrides: dict[str, Any] | None = None, grader: Any = None, progress: IO[str] | None = sys.stderr,
              plot: bool = True) -> BenchReport:
    """Grade ``solutions`` (default: the suite's ``solutions/``) against ``suite`` and write the report.

    Call it from synchronous code (it runs its own event loop); from a coroutine, use
    ``await asyncio.to_thread(run_bench, ...)``.

    Args:
        suite: a :class:`Suite` or its directory.
        solutions: directory of candidate files named like the tasks.
        device: ``cpu`` or ``cuda`` (default: cuda if available).
        out: output directory (created); None writes nothing.
        workers: concurrent evaluations. Default with the bench's own grader: on ``cpu`` 1 (timed
            kernels would share the cores), on ``cuda`` the LocalGrader's capacity (6 per GPU: the
            candidates compile and check in parallel while timing stays exclusive per GPU, so
            concurrency does not disturb timings); with a given grader, its ``capacity``.
        seed: master seed of every evaluation (None: hidden seeds from the OS).
        tasks: task filter, see :meth:`Suite.select`.
        size: ``small`` or ``full`` (default: small on cpu, full on cuda).
        overrides: extra EvalConfig fields.
        grader: a :class:`~drkernel.env.Grader` to grade with (a remote pool, a fake in tests); it is
            sent the suite's protocol as ``options`` and stays open (the caller closes it). Default:
            a :class:`~drkernel.env.LocalGrader` with ``capacity=workers``, closed at the end.
        progress: stream for one line per finished task; None is silent.
        plot: write speedups.png (skipped with a warning if matplotlib is missing).

    Raises:
        SuiteError: unusable suite; ValueError: bad arguments; EnvironmentFailure: CUDA asked for
        and not available.
    """
    t_start = time.monotonic()
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
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
    partial = None
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        partial = Path(out) / PARTIAL_NAME
        partial.write_text("", encoding="utf-8")
    record = _Recorder(len(selected), max(len(t.id) for t in selected), partial, progress)

    # what cannot be graded is recorded at once; the rest becomes jobs
    jobs: list[Job] = []
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
        jobs.append(Job(st.id, task, cand, source))

    if jobs:
        own_grader = grader is None
        if own_grader:
            from drkernel.env import LocalGrader

            grader = LocalGrader(config, capacity=workers or (1 if device == "cpu" else None))
        try:
            asyncio.run(grade_jobs(grader, jobs, seed=seed, options=None if own_grader else protocol_options(config),
                                   concurrency=workers or grader.capacity, on_done=record))
        finally:
            if own_grader:
                grader.close()

    report.outcomes = [record.outcomes[t.id] for t in selected]
    report.summary = summarize(report.outcomes)
    report.wall_seconds = time.monotonic() - t_start
    if out is not None:
        write_report(report, out, plot=plot)
        partial.unlink(missing_ok=True)
    return report


__all__ = ["run_bench", "grade_jobs", "protocol_options", "default_device", "Job"]
