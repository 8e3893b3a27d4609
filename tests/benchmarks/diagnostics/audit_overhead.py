"""What the worker's audit costs a candidate's host launch path, and how many audit events it sees.

    python tests/benchmarks/diagnostics/audit_overhead.py [--tasks envs/single_ops:01_relu,...] [--calls 200]

The worker imports the candidate through trusted code and then runs every call with a Python audit
hook enforcing (:class:`drkernel.env.guards.audit.Auditor`): each audit event the forward raises costs a
walk of the stack to find who is to blame. The host time of the forward is what the launch budget's
hold must cover (a multi-launch candidate whose launches outlast it has the gaps between its kernels
timed), so this script times the forward's host path (its launches, no sync) per call:

* ``bare``: the solution imported and called as any program would;
* ``audited``: the same objects, after :meth:`Auditor.install` with ``enforcing`` on, plus the
  per-call fingerprint (:meth:`StateGuard.changes`) timed apart; audit events are counted by name.

The audit cannot be removed from a process once installed: every task's bare run comes first.
Needs CUDA (on CPU, Triton's interpreter would time the interpreter). It compiles the solutions into
Triton's default cache, as any program would (the grader's renamed kernels have their own keys).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

DEFAULT_TASKS = ("envs/single_ops:01_relu,envs/single_ops:18_matmul_square,envs/single_ops:13_softmax,"
                 "envs/fused_ops:01_linear_relu,envs/fused_ops:03_linear_scale_residual_clamp")


def _launch_ms(model, inputs, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return out


def _q(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": round(statistics.median(xs), 4), "p90": round(xs[int(0.9 * (len(xs) - 1))], 4),
            "min": round(xs[0], 4)}


def main() -> int:
    from drkernel.env.guards.audit import Auditor, StateGuard
    from drkernel.env.process.loading import import_file

    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated suite:task")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    runs = []
    for spec in args.tasks.split(","):
        suite, name = spec.split(":")
        tmod = import_file(str(ROOT / suite / "tasks" / f"{name}.py"))
        smod = import_file(str(ROOT / suite / "solutions" / f"{name}.py"))
        torch.manual_seed(0)
        model = smod.ModelNew(*tmod.get_init_inputs()).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in tmod.get_inputs()]
        _launch_ms(model, inputs, 10)  # compile and load
        runs.append({"task": spec, "model": model, "inputs": inputs, "bare": _launch_ms(model, inputs, args.calls)})
    auditor = Auditor()
    auditor.install(torch)
    guard = StateGuard(torch)
    guard.snapshot()
    counts: dict[str, int] = {}
    live = {"on": False}

    def count(event: str, _args: tuple) -> None:
        if live["on"]:
            counts[event] = counts.get(event, 0) + 1

    auditor.enforcing = False
    sys.addaudithook(count)
    auditor.enforcing = True
    results = []
    for r in runs:
        counts.clear()
        live["on"] = True
        audited = _launch_ms(r["model"], r["inputs"], args.calls)
        live["on"] = False
        per_call = {k: round(v / args.calls, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
        t0 = time.perf_counter()
        for _ in range(args.calls):
            guard.changes(full=False)
        guard_ms = (time.perf_counter() - t0) * 1e3 / args.calls
        res = {"task": r["task"], "bare_ms": _q(r["bare"]), "audited_ms": _q(audited),
               "audit_events_per_call": per_call, "fingerprint_ms": round(guard_ms, 4),
               "records": len(auditor.records())}
        results.append(res)
        print(f"{r['task']}: forward host {res['bare_ms']['p50']:.4f} ms bare, {res['audited_ms']['p50']:.4f} ms "
              f"audited (p90 {res['bare_ms']['p90']:.4f} / {res['audited_ms']['p90']:.4f}); "
              f"events/call {per_call}; fingerprint {guard_ms:.4f} ms")
    auditor.enforcing = False  # (this script's own file writes would be refused as a kernel's)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "calls": args.calls,
                                              "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
