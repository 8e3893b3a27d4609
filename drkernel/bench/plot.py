"""``speedups.png``: per-task speedups on a log scale, lines at 1.0x and 1.2x, failures marked (matplotlib)."""

from __future__ import annotations

import os
from pathlib import Path

from drkernel.bench.fmt import pct
from drkernel.bench.outcomes import PASS, BenchReport


def plot_speedups(report: BenchReport, path: str | os.PathLike) -> Path:
    """Per-task speedup bars (log scale), lines at 1.0 and 1.2; failed tasks as red crosses at the floor.

    Raises:
        MissingDependency: matplotlib is not installed (``pip install drkernel[bench]``).
    """
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
    ax.set_xticks(list(range(len(names))))
    ax.set_xticklabels(names, rotation=75, ha="right", fontsize=8)
    ax.set_ylabel("speedup (reference / kernel)")
    s = report.summary
    ax.set_title(f"{report.suite.id} on {report.device}: pass {pct(s['correctness_rate'])}, "
                 f"Fast@1 {pct(s['fast@1'])}, Fast@1.2 {pct(s['fast@1.2'])}", fontsize=10)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["plot_speedups"]
