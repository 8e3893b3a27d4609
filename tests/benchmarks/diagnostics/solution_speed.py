"""Where a suite solution's time goes: device time versus host launch overhead (CUDA only).

In-process probe for suite authors (the grader's isolation is not used; run the real grader with
``drkernel bench``). For each task it builds the reference and the reference solution at full size
with the same init seed, checks the output once, then times both, interleaved, under two orderings:

* ``idle``:   flush L2, synchronise, start event, call, end event, synchronise. The GPU waits for the
  host, so the event time includes the call's host-side launch path (Python, Triton's launcher).
* ``queued``: flush L2 (left in the queue), start event, call, end event, synchronise. The flush
  keeps the GPU busy while the host launches (KernelBench's and ``triton.testing.do_bench``'s order),
  so the event time is device time as long as the host path is shorter than the flush.

It also reports the host time of one call without any synchronisation (the launch path alone).

    python tests/benchmarks/diagnostics/solution_speed.py --suite envs/single_ops --tasks '0*' --out speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def _load_solution(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_sol_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_pair(st, entry_point: str, solutions: Path):
    """(loaded task, reference model, solution model, inputs) on CUDA at full size; both models are
    built under the same seed, as the grader does."""
    import torch

    from drkernel.env.tasks.task import split_init_inputs

    loaded = st.task(entry_point).load("full")
    args, kwargs = split_init_inputs(loaded.init_inputs(1))
    torch.manual_seed(2)
    ref = loaded.model_cls(*args, **kwargs).cuda().eval()
    sol = _load_solution(solutions / st.filename)
    torch.manual_seed(2)
    cand = getattr(sol, f"{entry_point}New")(*args, **kwargs).cuda().eval()
    x = [a.cuda() if isinstance(a, torch.Tensor) else a for a in loaded.draw_inputs(3, "native")]
    return loaded, ref, cand, x


def probe(st, entry_point: str, solutions: Path, trials: int) -> dict:
    import torch

    from drkernel.env.judge.compare import compare_outputs

    loaded, ref, cand, x = build_pair(st, entry_point, solutions)
    with torch.no_grad():
        want = ref(*x)
        got = cand(*x)
    torch.cuda.synchronize()
    atol, rtol = loaded.tolerance(1e-4, 1e-4)
    verdict = compare_outputs(got, want, atol, rtol)
    flush = torch.empty(256 << 18, dtype=torch.float32, device="cuda")  # 256 MiB, as KernelBench
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once(model, queued: bool) -> float:
        flush.zero_()
        if not queued:
            torch.cuda.synchronize()
        ev0.record()
        model(*x)
        ev1.record()
        torch.cuda.synchronize()
        return ev0.elapsed_time(ev1)

    def host_launch(model) -> float:
        torch.cuda.synchronize()
        flush.zero_()  # keep the GPU busy so the launch never waits on a full queue
        t0 = time.perf_counter()
        model(*x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) * 1e3

    times: dict[str, list[float]] = {k: [] for k in
                                     ("ref_idle", "cand_idle", "ref_queued", "cand_queued", "ref_host", "cand_host")}
    with torch.no_grad():
        for _ in range(3):
            once(ref, True), once(cand, True)
        for i in range(trials):
            pair = ((ref, "ref"), (cand, "cand")) if i % 2 == 0 else ((cand, "cand"), (ref, "ref"))
            for model, who in pair:
                times[f"{who}_idle"].append(once(model, False))
                times[f"{who}_queued"].append(once(model, True))
                times[f"{who}_host"].append(host_launch(model))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"task": st.id, "correct": bool(verdict.ok), "detail": verdict.to_dict(), **med,
            "speedup_idle": med["ref_idle"] / med["cand_idle"],
            "speedup_queued": med["ref_queued"] / med["cand_queued"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--tasks", default=None, help="comma-separated globs over task ids")
    ap.add_argument("--solutions", default=None)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import torch

    from drkernel.env.tasks.suite import load_suite

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    suite = load_suite(a.suite)
    sols = Path(a.solutions) if a.solutions else suite.solutions_dir
    rows = []
    print(f"{'task':34s} ok  ref_idle cand_idle  x_idle | ref_q  cand_q  x_queued | host_ref host_cand (ms)")
    for st in suite.select(a.tasks):
        try:
            r = probe(st, suite.entry_point, sols, a.trials)
        except Exception as exc:  # noqa: BLE001 - report and go on
            r = {"task": st.id, "error": f"{type(exc).__name__}: {exc}"}
            print(f"{st.id:34s} ERROR {r['error'][:200]}")
        else:
            print(f"{r['task']:34s} {'y' if r['correct'] else 'N'} {r['ref_idle']:8.4f} {r['cand_idle']:8.4f} "
                  f"{r['speedup_idle']:6.2f}x | {r['ref_queued']:7.4f} {r['cand_queued']:7.4f} "
                  f"{r['speedup_queued']:6.2f}x | {r['ref_host']:7.4f} {r['cand_host']:7.4f}", flush=True)
        rows.append(r)
        torch.cuda.empty_cache()
    ok = [r for r in rows if "error" not in r]
    if ok:
        for key in ("speedup_idle", "speedup_queued"):
            g = statistics.geometric_mean([r[key] for r in ok])
            fast = sum(r[key] >= 1.0 for r in ok)
            print(f"{key}: geomean {g:.3f}x, >=1.0 on {fast}/{len(ok)}")
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
