"""Is a timed kernel's round-to-round drift the SM clock? Measured in a kernel, not read from NVML.

    python tests/benchmarks/diagnostics/effective_clock.py [--task 18_matmul_square] [--rounds 20] [--calls 50]

The suite's solution is timed as the grader times it (L2 flush, ~1 ms GPU sleep to hide the host's
launch path, CUDA events), ``--calls`` calls per round. Right behind each call's end event a
one-thread probe kernel spins ~20 us and divides the SM cycles it counted (``%clock64``) by the
nanoseconds that passed (``%globaltimer``): the clock the SMs actually ran at just after the call
(power management acts over milliseconds, so it is the clock of the call's end). A thread samples
NVML every millisecond meanwhile (power, SM clock as NVML reports it, clock-event reasons).

``--between ref`` runs the task's reference once between calls (the cadence of
placement_probe.py, where the candidate's medians held within 0.3-0.7% over 12 rounds, against
1.7% back to back in process_placement.py).

If slow rounds come with a lower measured clock, the drift is the GPU's power management: no
scheduling in the grader removes it; only locked clocks (``nvidia-smi -lgc``, an administrator's
setting) or a cycle count would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from placement_probe import load  # (this directory: run as a script)

from drkernel.env.measure.budget import _clock, _now  # the hold's own reads of %globaltimer and %clock64

ROOT = Path(__file__).resolve().parents[3]


@triton.jit
def _clock_probe(out_ptr, idx, ns):
    t0 = _now()
    c0 = _clock()
    t1 = t0
    while t1 - t0 < ns:
        t1 = _now()
    c1 = _clock()
    tl.store(out_ptr + 2 * idx, c1 - c0)
    tl.store(out_ptr + 2 * idx + 1, t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / "envs" / "single_ops"))
    ap.add_argument("--task", default="18_matmul_square")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--between", choices=("none", "ref"), default="none")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import pynvml

    suite = Path(args.suite)
    tmod, smod = load(suite / "tasks" / f"{args.task}.py"), load(suite / "solutions" / f"{args.task}.py")
    dev = torch.device("cuda")
    model = smod.ModelNew(*tmod.get_init_inputs()).to(dev)
    ref = tmod.Model(*tmod.get_init_inputs()).to(dev)
    torch.manual_seed(0)
    xs = [x.to(dev) for x in tmod.get_inputs()]
    flush = torch.empty(256 << 20 >> 2, device=dev)
    probe = torch.zeros(2 * args.calls, dtype=torch.int64, device=dev)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples: list[tuple[float, int, int, float]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1000))
            time.sleep(0.001)

    rounds = []
    all_t, all_mhz = [], []
    with torch.no_grad():
        for _ in range(5):
            model(*xs)
            _clock_probe[(1,)](probe, 0, 20_000)
        torch.cuda.synchronize()
        threading.Thread(target=poll, daemon=True).start()
        for _ in range(args.rounds):
            t_open = time.perf_counter()
            ts = []
            for i in range(args.calls):
                if args.between == "ref":
                    ref(*xs)
                torch.cuda.synchronize()
                flush.zero_()
                torch.cuda._sleep(2_000_000)
                s.record()
                model(*xs)
                e.record()
                _clock_probe[(1,)](probe, i, 20_000)
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e))
            t_close = time.perf_counter()
            p = probe.view(-1, 2).cpu().tolist()
            mhz = [1e3 * c / ns for c, ns in p]
            all_t += ts
            all_mhz += mhz
            win = [x for x in samples if t_open <= x[0] <= t_close]
            reasons = 0
            for x in win:
                reasons |= x[2]
            row = {"median_ms": statistics.median(ts), "min_ms": min(ts),
                   "probe_mhz_median": statistics.median(mhz), "probe_mhz_min": min(mhz), "probe_mhz_max": max(mhz),
                   "nvml_mhz_min": min((x[1] for x in win), default=None),
                   "nvml_power_max_w": max((x[3] for x in win), default=None),
                   "nvml_power_median_w": statistics.median([x[3] for x in win]) if win else None,
                   "reasons": reasons}
            rounds.append(row)
            print(f"median {row['median_ms']:.4f} min {row['min_ms']:.4f} ms  probe MHz {row['probe_mhz_median']:.0f} "
                  f"({row['probe_mhz_min']:.0f}-{row['probe_mhz_max']:.0f})  NVML min {row['nvml_mhz_min']} MHz, "
                  f"power median {row['nvml_power_median_w']} max {row['nvml_power_max_w']} W, reasons {reasons:#x}",
                  flush=True)
    stop.set()
    med = [r["median_ms"] for r in rounds]
    n = len(all_t)
    mt, mm = statistics.mean(all_t), statistics.mean(all_mhz)
    cov = sum((a - mt) * (b - mm) for a, b in zip(all_t, all_mhz)) / n
    corr = cov / (statistics.pstdev(all_t) * statistics.pstdev(all_mhz) or float("nan"))
    summary = {"task": args.task, "between": args.between, "round_medians_max_over_min_minus_1": max(med) / min(med) - 1,
               "corr_call_time_vs_probe_mhz": corr, "rounds": rounds}
    print(f"{args.task} between={args.between}: round medians max/min-1 {100 * summary['round_medians_max_over_min_minus_1']:.2f}%, "
          f"corr(call time, probe MHz) {corr:.3f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
