"""Sequential test-time scaling: revise a kernel over many turns, keeping R turns of context.

Per task (Dr. Kernel's multi-iteration scaling, with two flaws of its published code fixed: it
kept only the first message, dropping any system message, and a contiguous window of turns)::

    iteration 0:        an episode of M turns from the first prompt
    iteration i >= 1:   keep R earlier turns (select), play M - R new turns after them
    total turns:        T = M + (I - 1)(M - R)

``select="last"`` keeps the last R turns; ``select="best"`` keeps the R best *individual* turns by
reward (ties: the later turn), in their original order (the paper's code kept the best
*contiguous* window). The context of a new turn is the first prompt (and system message) followed
by the kept turns' replies and feedback. The best candidate is reported over all T turns
(:meth:`Trajectory.best_turn`: the fastest passing kernel).

The output directory makes a run resumable and inspectable::

    run.json                        settings; a rerun with different M/I/R/select/model is refused
    tasks/<task>/turn_<k>/          reply.md, kernel.py, result.json, feedback.md, turn.json
    tasks/<task>/trajectory.json    when the task's run is complete
    summary.json, summary.png       per-turn and best-candidate metrics (:func:`summarize`)

``turn.json`` is written last (atomically): a turn with it is finished and is replayed, never
regenerated or regraded, when the run is started again; everything else is recomputed from it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drkernel.agent.context import TokenCounter, approx_tokens
from drkernel.agent.episode import EpisodeConfig, Limits, Scorer, TaskLike, finalize_trajectory, run_episode
from drkernel.agent.types import Generate, Trajectory, Turn

SELECT_METHODS = ("last", "best")
FAST_P = (1.0, 1.2)
RESUME_KEYS = ("max_turns", "iterations", "remain_turns", "select", "model", "prompt_template")
"""run.json keys that must match for a run to be continued."""


@dataclass
class ScalingConfig:
    """Sequential test-time scaling settings (the paper's eval: M=5, I=10, R=4, best)."""

    max_turns: int = 3
    """M: turns of the first iteration; every later one tops the kept context up to M."""
    iterations: int = 1
    """I: iterations (1 = a plain multi-turn episode)."""
    remain_turns: int = 0
    """R: earlier turns kept as context for the next iteration (0 <= R < M)."""
    select: str = "last"
    """Which R turns to keep: ``last`` or ``best`` (by reward, individual turns)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.iterations < 1:
            raise ValueError(f"max_turns and iterations must be >= 1, got {self.max_turns}, {self.iterations}")
        if not 0 <= self.remain_turns < self.max_turns:
            raise ValueError(f"remain_turns must be in [0, max_turns), got {self.remain_turns} "
                             f"with max_turns={self.max_turns}")
        if self.select not in SELECT_METHODS:
            raise ValueError(f"select must be one of {SELECT_METHODS}, got {self.select!r}")

    @property
    def total_turns(self) -> int:
        """T = M + (I - 1)(M - R)."""
        return self.max_turns + (self.iterations - 1) * (self.max_turns - self.remain_turns)


def select_turns(turns: Sequence[Turn], keep: int, how: str) -> list[Turn]:
    """The ``keep`` turns to continue from, in their original order (module doc)."""
    if keep <= 0:
        return []
    if len(turns) <= keep:
        return list(turns)
    if how == "last":
        return list(turns[-keep:])
    if how == "best":
        chosen = sorted(turns, key=lambda t: (t.reward, t.index), reverse=True)[:keep]
        return sorted(chosen, key=lambda t: t.index)
    raise ValueError(f"select must be one of {SELECT_METHODS}, got {how!r}")


async def refine_task(task: TaskLike, generate: Generate, grader: Scorer, episode: EpisodeConfig,
                      scaling: ScalingConfig, *, limits: Limits | None = None,
                      count_tokens: TokenCounter = approx_tokens, on_turn: Any = None,
                      replay: Any = None) -> Trajectory:
    """All T turns of one task (module doc); the returned trajectory holds every turn in order."""
    limits = limits or Limits(1, max(1, int(grader.capacity)))
    turns: list[Turn] = []
    error = None
    for iteration in range(scaling.iterations):
        context = select_turns(turns, scaling.remain_turns, scaling.select) if iteration else []
        part = await run_episode(task, generate, grader, episode, context=context, start_index=len(turns),
                                 num_turns=scaling.max_turns - len(context), limits=limits,
                                 count_tokens=count_tokens, on_turn=on_turn, replay=replay, finalize=False)
        turns.extend(part.turns)
        error = part.error
        if error or any(t.status == "context_overflow" for t in part.turns):
            break
    return finalize_trajectory(Trajectory(task=task.name, turns=turns, error=error))


# --------------------------------------------------------------------------- output directory


class RunDir:
    """The resumable output directory (module doc for the layout)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def task_dir(self, task: str) -> Path:
        return self.root / "tasks" / task

    def turn_dir(self, task: str, index: int) -> Path:
        return self.task_dir(task) / f"turn_{index:03d}"

    def check_settings(self, settings: dict[str, Any], overwrite: bool = False) -> bool:
        """Write run.json, or check it against ``settings``; True when continuing an earlier run."""
        path = self.root / "run.json"
        if path.is_file() and not overwrite:
            old = json.loads(path.read_text(encoding="utf-8"))
            diff = {k: (old.get(k), settings.get(k)) for k in RESUME_KEYS if old.get(k) != settings.get(k)}
            if diff:
                raise ValueError(f"{self.root} holds a run with other settings "
                                 + ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
                                 + "; use another --out or --overwrite")
            return True
        if overwrite and (self.root / "tasks").is_dir():
            import shutil

            shutil.rmtree(self.root / "tasks")  # start over: no stale turns of the old run
        self.root.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps(settings, indent=2, sort_keys=True))
        return False

    def load_turn(self, task: str, index: int) -> Turn | None:
        path = self.turn_dir(task, index) / "turn.json"
        if not path.is_file():
            return None
        try:
            return Turn.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: run the turn again

    def save_turn(self, task: str, turn: Turn) -> None:
        d = self.turn_dir(task, turn.index)
        d.mkdir(parents=True, exist_ok=True)
        (d / "reply.md").write_text(turn.reply, encoding="utf-8")
        if turn.code is not None:
            (d / "kernel.py").write_text(turn.code, encoding="utf-8")
        if turn.result is not None:
            (d / "result.json").write_text(turn.result.to_json(indent=2), encoding="utf-8")
        (d / "feedback.md").write_text(turn.feedback, encoding="utf-8")
        _write_atomic(d / "turn.json", json.dumps(turn.to_dict()))  # last: marks the turn finished

    def save_trajectory(self, trajectory: Trajectory) -> None:
        d = self.task_dir(trajectory.task)
        d.mkdir(parents=True, exist_ok=True)
        _write_atomic(d / "trajectory.json", json.dumps(trajectory.to_dict()))

    def load_trajectories(self) -> list[Trajectory]:
        out = []
        for path in sorted((self.root / "tasks").glob("*/trajectory.json")):
            out.append(Trajectory.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        return out


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- metrics


def _metrics(turns: Sequence[Turn | None]) -> dict[str, Any]:
    """correct_rate, fast@p, hack_rate, mean_speedup over ``turns`` (one per task; None = missing)."""
    present = [t for t in turns if t is not None]
    n = len(present)
    passed = [t for t in present if t.passed]
    speeds = [t.speedup for t in passed if t.speedup is not None and math.isfinite(t.speedup)]
    out: dict[str, Any] = {"num_tasks": n}
    out["correct_rate"] = len(passed) / n if n else None
    for p in FAST_P:
        # Fast@p over all tasks: passing and s >= p (incorrect counts as not fast), as in the paper
        out[f"fast@{p:g}"] = sum(1 for s in speeds if s >= p) / n if n else None
    out["hack_rate"] = sum(1 for t in present if t.result is not None and t.result.hacked) / n if n else None
    out["mean_speedup"] = sum(speeds) / len(speeds) if speeds else None  # over passing kernels
    out["no_code_rate"] = sum(1 for t in present if t.status == "no_code") / n if n else None
    return out


def summarize(trajectories: Sequence[Trajectory], total_turns: int | None = None) -> dict[str, Any]:
    """The run's metrics, as written to ``summary.json``.

    * ``per_turn[t]``: over the tasks that have turn t (global turn index t, 1-based in ``turn``):
      ``correct_rate`` = passing / tasks; ``fast@1``, ``fast@1.2`` = (passing and speedup >= p) /
      tasks; ``hack_rate`` = hacked / tasks; ``mean_speedup`` = mean speedup of the passing
      kernels (null if none); ``no_code_rate``.
    * ``best_by_turn[t]``: the same keys for each task's best candidate among its turns <= t.
    * ``best``: the same keys for each task's best candidate over all its turns.
    * ``tasks``: per task, the best turn, its speedup, and the error if the run failed.
    """
    t_max = total_turns if total_turns is not None else max((len(tr.turns) for tr in trajectories), default=0)
    per_turn, best_by_turn = [], []
    for t in range(t_max):
        at_t = [tr.turns[t] if t < len(tr.turns) else None for tr in trajectories]
        per_turn.append({"turn": t + 1, **_metrics(at_t)})
        upto = [Trajectory(tr.task, tr.turns[: t + 1]).best_turn() if tr.turns else None for tr in trajectories]
        best_by_turn.append({"turn": t + 1, **_metrics(upto)})
    bests = [tr.best_turn() for tr in trajectories]
    tasks = {}
    for tr, b in zip(trajectories, bests):
        tasks[tr.task] = {"turns": len(tr.turns), "best_turn": b.index + 1 if b else None,
                          "passed": bool(b and b.passed), "speedup": b.speedup if b else None,
                          "reward": b.reward if b else None, "error": tr.error}
    return {"num_tasks": len(trajectories), "per_turn": per_turn, "best_by_turn": best_by_turn,
            "best": _metrics(bests), "tasks": tasks}


def format_table(summary: dict[str, Any]) -> str:
    """The per-turn table and the best-candidate row, as text."""
    keys = ["correct_rate", "fast@1", "fast@1.2", "hack_rate", "mean_speedup"]

    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    rows = [["turn", "tasks", *keys]]
    for e in summary["per_turn"]:
        rows.append([str(e["turn"]), str(e["num_tasks"]), *(cell(e[k]) for k in keys)])
    b = summary["best"]
    rows.append(["best", str(b["num_tasks"]), *(cell(b[k]) for k in keys)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot_summary(summary: dict[str, Any], path: str | os.PathLike, title: str = "") -> Path:
    """PNG of correct_rate, fast@1 and fast@1.2 per turn (solid) and best-so-far (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    turns = [e["turn"] for e in summary["per_turn"]]
    for key, color in (("correct_rate", "tab:blue"), ("fast@1", "tab:orange"), ("fast@1.2", "tab:green")):
        ax.plot(turns, [e[key] if e[key] is not None else math.nan for e in summary["per_turn"]],
                marker="o", color=color, label=f"{key} (turn)")
        ax.plot(turns, [e[key] if e[key] is not None else math.nan for e in summary["best_by_turn"]],
                linestyle="--", color=color, label=f"{key} (best so far)")
    ax.set_xlabel("turn")
    ax.set_ylabel("fraction of tasks")
    ax.set_ylim(-0.02, 1.02)
    if turns:
        ax.set_xticks(turns)
    ax.grid(alpha=0.3)
    ax.set_title(title or f"sequential test-time scaling ({summary['num_tasks']} tasks)")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


# --------------------------------------------------------------------------- the run


@dataclass
class RefineReport:
    """What :func:`refine` returns."""

    trajectories: list[Trajectory]
    summary: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)
    """Task -> why its run stopped early (generation or grading failure)."""
    replayed_turns: int = 0
    """Turns taken from an earlier run's output directory."""


async def refine(tasks: Sequence[TaskLike], generate: Generate, grader: Scorer, episode: EpisodeConfig,
                 scaling: ScalingConfig, out_dir: str | os.PathLike | None = None, *,
                 generation_concurrency: int = 8, count_tokens: TokenCounter = approx_tokens,
                 settings: dict[str, Any] | None = None, overwrite: bool = False, progress: bool = True,
                 plot: bool = True) -> RefineReport:
    """Test-time scaling over ``tasks`` concurrently; writes ``out_dir`` (resumable) when given.

    ``settings`` go to run.json (with M, I, R and select); see :data:`RESUME_KEYS`.
    """
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError("task names must be unique (they name the output folders)")
    run = RunDir(out_dir) if out_dir is not None else None
    if run is not None:
        meta = {**(settings or {}), "max_turns": scaling.max_turns, "iterations": scaling.iterations,
                "remain_turns": scaling.remain_turns, "select": scaling.select,
                "prompt_template": episode.prompt_template, "total_turns": scaling.total_turns}
        run.check_settings(meta, overwrite=overwrite)

    bar = _progress(len(tasks) * scaling.total_turns, progress)
    replayed: set[tuple[str, int]] = set()

    def replay_for(task: TaskLike) -> Any:
        def replay(index: int) -> Turn | None:
            turn = run.load_turn(task.name, index) if run is not None and not overwrite else None
            if turn is not None:
                replayed.add((task.name, index))
            return turn
        return replay

    def on_turn(task: TaskLike, turn: Turn) -> None:
        if run is not None and (task.name, turn.index) not in replayed:
            run.save_turn(task.name, turn)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{task.name} turn {turn.index + 1}: {turn.status}"
                                + (f", reward {turn.reward:.2f}" if turn.status == "graded" else ""))

    limits = Limits(generation_concurrency, max(1, int(grader.capacity)))
    try:
        trajectories = list(await asyncio.gather(*(
            refine_task(task, generate, grader, episode, scaling, limits=limits, count_tokens=count_tokens,
                        on_turn=on_turn, replay=replay_for(task)) for task in tasks)))
    finally:
        if bar is not None:
            bar.close()
    errors = {tr.task: tr.error for tr in trajectories if tr.error}
    summary = summarize(trajectories, scaling.total_turns)
    if run is not None:
        for tr in trajectories:
            if not tr.error:
                run.save_trajectory(tr)
        _write_atomic(run.root / "summary.json", json.dumps(summary, indent=2))
        if plot:
            try:
                plot_summary(summary, run.root / "summary.png")
            except ImportError:
                print("matplotlib is not installed: no summary.png", file=sys.stderr)
    return RefineReport(trajectories=trajectories, summary=summary, errors=errors, replayed_turns=len(replayed))


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="tasks x turns", unit="turn", dynamic_ncols=True)


__all__ = ["ScalingConfig", "SELECT_METHODS", "select_turns", "refine_task", "refine", "RefineReport", "RunDir",
           "summarize", "format_table", "plot_summary"]
