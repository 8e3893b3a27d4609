"""Where a compiler's time goes (drkernel.env.process.precompile): compilers forked from a CUDA worker's
zygote for a suite's reference solutions, one at a time and then all at once, each waited for as
the grader does; prints each one's own phase timers (task, confine, import, build, forward) and the
grader's wait.

    python tests/benchmarks/diagnostics/compiler_phases.py --suite envs/single_ops --n 8 --out phases.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from drkernel.env.process.precompile import Compiler, cuda_target, job
    from drkernel.env.process.sandbox import worker_env
    from drkernel.env.process.zygote import spawn_compiler

    suite = Path(args.suite)
    tasks = sorted((suite / "tasks").glob("*.py"))[: args.n]
    import torch

    # (without a GPU here: compile for an H100 anyway, as the CPU tests do)
    target = cuda_target(args.device) if torch.cuda.is_available() else ["cuda", 90, 32]
    env = worker_env(args.device)
    t0 = time.monotonic()
    spawn_compiler(env, tempfile.mkdtemp(), {"zygote": "warm-up"})  # starts the zygote (this job fails at once)
    zygote_s = time.monotonic() - t0
    report: dict = {"zygote_start_s": round(zygote_s, 3), "runs": {}}

    def start(task: Path) -> tuple[Compiler, Path]:
        work = Path(tempfile.mkdtemp(prefix="drkernel-phases-"))
        shutil.copy(suite / "solutions" / task.name, work / "candidate.py")
        child = spawn_compiler(env, str(work), job(
            candidate_file=str(work / "candidate.py"), task_source=task.read_text(), task_name=task.stem,
            entry_point="Model", task_size="full", init_seed=1, kernel_suffix="__dkphases", target=target,
            timeout_s=60.0))
        return Compiler(child, str(work)), work

    for mode in ("one_at_a_time", "all_at_once"):
        rows = []
        t0 = time.monotonic()
        if mode == "one_at_a_time":
            for task in tasks:
                c, work = start(task)
                rows.append({"task": task.stem, **c.wait(60.0)})
                shutil.rmtree(work, ignore_errors=True)
        else:
            started = [(task, *start(task)) for task in tasks]
            for task, c, work in started:
                rows.append({"task": task.stem, **c.wait(60.0)})
                shutil.rmtree(work, ignore_errors=True)
        wall = time.monotonic() - t0
        for r in rows:
            print(f"{mode:14s} {r['task']:24s} complete={r['complete']!s:5s} waited={r['seconds']:.2f}s "
                  + " ".join(f"{k}={v:.3f}" for k, v in r.get("phases_s", {}).items()), flush=True)
        totals = [r["phases_s"].get("total", 0.0) for r in rows if r.get("phases_s")]
        print(f"{mode}: {len(rows)} compilers in {wall:.2f} s; own total median "
              f"{statistics.median(totals) if totals else float('nan'):.2f} s", flush=True)
        report["runs"][mode] = {"wall_s": round(wall, 3), "rows": rows}
    print(f"zygote start {zygote_s:.2f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
