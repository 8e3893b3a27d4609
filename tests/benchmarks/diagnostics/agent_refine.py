"""The scripted test-time-scaling run, end to end through the real CLI and the real grader.

    python tests/benchmarks/diagnostics/agent_refine.py --device cuda --out /tmp/agent_refine   # GPU box, offline
    python tests/benchmarks/diagnostics/agent_refine.py --device cpu --tasks 01_relu,06_hardtanh --max-turns 2
                                                                # CPU (CI, slow)

A loopback OpenAI-compatible server (tests/agent/scripted_server.py) plays a scripted model over
suite tasks: task k's first reply is a wrong kernel (its reference solution with the output
scaled) for even k and a reply without code for odd k; after any other feedback than "correct" it
answers with the suite's reference solution, and after "correct" with the solution again.
``examples/refine_loop.py`` runs against it with ``--device``; the first run is killed (SIGKILL)
once ``--kill-after`` turns are on disk, then the same command runs again and must finish the
run without regenerating a finished turn.

Checks (exit 1 if one fails): turn 1 passes nothing; from turn 2 on every task passes; the best
candidate of every task passes; the resumed run generated only the missing turns. Prints the CLI's
table and a JSON line with the numbers (per-turn correct rate, best fast@1 / fast@1.2 / mean
speedup, per-task best speedups, requests, wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from drkernel.env.tasks.suite import load_suite  # noqa: E402
from tests.agent.scripted_server import ScriptedServer, fenced, kernel_policy  # noqa: E402

WRONG_SUFFIX = ("\n\nclass _Scaled(ModelNew):\n    def forward(self, *args):\n"
                "        return super().forward(*args) * 1.5 + 0.25\n\n\nModelNew = _Scaled\n")


def build_script(suite, task_ids: list[str]) -> dict[str, dict[str, str]]:
    """Replies keyed by a line of each task's source (the first prompt contains it)."""
    script = {}
    for k, task_id in enumerate(task_ids):
        st = suite.task(task_id)
        if st.solution is None:
            raise SystemExit(f"task {task_id} has no reference solution")
        solution = st.solution.read_text(encoding="utf-8")
        marker = next(line for line in st.path.read_text(encoding="utf-8").splitlines()
                      if line.startswith('"""') or "class Model" in line)
        if any(marker == m for m in script):
            raise SystemExit(f"ambiguous marker {marker!r}")
        first = (fenced(solution + WRONG_SUFFIX, "A first version.") if k % 2 == 0
                 else "Let me think about the memory layout before writing code.")
        fixed = fenced(solution, "Fixed, here is the full program.")
        script[marker] = {"first": first, **{key: fixed for key in (
            "after_incorrect", "after_compile", "after_no_code", "after_hack", "after_correct")}}
    return script


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return round(values[len(values) // 2], 2) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--suite", default=str(ROOT / "envs/single_ops"))
    ap.add_argument("--tasks", default="01_relu,06_hardtanh,13_softmax,18_matmul_square",
                    help="comma-separated task ids (each needs a reference solution)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--remain-turns", type=int, default=1)
    ap.add_argument("--select", default="best", choices=["last", "best"])
    ap.add_argument("--kill-after", type=int, default=1, help="SIGKILL the first run after this many turns (0: no kill)")
    ap.add_argument("--out", default="/tmp/drkernel-agent-refine")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more refine_loop.py options")
    args = ap.parse_args()

    suite = load_suite(args.suite)
    task_ids = [t.strip() for t in args.tasks.split(",") if t.strip()]
    out = Path(args.out)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    total = args.max_turns + (args.iterations - 1) * (args.max_turns - args.remain_turns)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OPENAI_API_KEY": "x"}
    t_start = time.time()
    with ScriptedServer(kernel_policy(build_script(suite, task_ids))) as server:
        cmd = [sys.executable, str(ROOT / "examples/refine_loop.py"), "--base-url", server.url, "--model", "scripted",
               "--suite", args.suite, "--tasks", ",".join(task_ids), "--device", args.device,
               "--max-turns", str(args.max_turns), "--iterations", str(args.iterations),
               "--remain-turns", str(args.remain_turns), "--select", args.select, "--out", str(out),
               "--max-retries", "1", "--timeout", "60", "--no-progress", "--seed", "0",
               "--sft-out", str(out / "sft.jsonl"), "--sft-min-reward", "0.5", *args.extra]
        killed_at: list[str] = []
        if args.kill_after:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            while proc.poll() is None and len(list(out.glob("tasks/*/turn_*/turn.json"))) < args.kill_after:
                time.sleep(0.2)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            killed_at = sorted(str(p.relative_to(out)) for p in out.glob("tasks/*/turn_*/turn.json"))
            print(f"first run killed with {len(killed_at)} finished turn(s) on disk")
        mtimes = {p: (out / p).stat().st_mtime_ns for p in killed_at}
        requests_before = len(server.requests)
        print("resuming:", " ".join(cmd[1:]), flush=True)
        run = subprocess.run(cmd, env=env)  # its table and messages go straight to this output
        requests_after = len(server.requests) - requests_before
    if run.returncode != 0:
        print(f"refine_loop.py exited {run.returncode}")
        return 1
    summary = json.loads((out / "summary.json").read_text())
    per_turn = summary["per_turn"]
    checks = {
        "turn 1 passes nothing": per_turn[0]["correct_rate"] == 0.0,
        "every later turn passes every task": all(e["correct_rate"] == 1.0 for e in per_turn[1:]),
        "best candidate passes everywhere": summary["best"]["correct_rate"] == 1.0,
        "finished turns were not redone": all((out / p).stat().st_mtime_ns == mtimes[p] for p in killed_at),
        "resume generated only missing turns": requests_after <= len(task_ids) * total - len(killed_at),
        "sft export: one dialogue per task": len((out / "sft.jsonl").read_text().splitlines()) == len(task_ids),
    }
    numbers = {
        "device": args.device, "tasks": len(task_ids), "turns": total,
        "correct_rate_per_turn": [e["correct_rate"] for e in per_turn],
        "best": {k: summary["best"][k] for k in ("correct_rate", "fast@1", "fast@1.2", "mean_speedup")},
        "best_speedup": {t: v["speedup"] for t, v in summary["tasks"].items()},
        "resumed_turns": len(killed_at), "requests_after_resume": requests_after,
        "grade_s_median": _median([json.loads(p.read_text())["seconds"].get("grade", 0.0)
                                   for p in out.glob("tasks/*/turn_*/turn.json")
                                   if json.loads(p.read_text())["status"] == "graded"]),
        "wall_s": round(time.time() - t_start, 1),
    }
    print(json.dumps(numbers))
    print("per task and turn (status, speedup, hack reasons, grading seconds):")
    for task_dir in sorted(out.glob("tasks/*")):
        cells = []
        for path in sorted(task_dir.glob("turn_*/turn.json")):
            t = json.loads(path.read_text())
            r = t["result"] or {}
            verdict = t["status"] if t["status"] != "graded" else (
                "hacked:" + "+".join(r["hack_reasons"]) if r["hacked"] else
                f"pass {r['speedup']:.2f}x" if r["passed"] and r.get("speedup") else
                "pass" if r["passed"] else f"fail:{(r.get('error') or {}).get('stage')}")
            cells.append(f"{verdict} ({t['seconds'].get('grade', 0):.0f}s)")
        print(f"  {task_dir.name}: " + " | ".join(cells))
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
