"""Does clearing persisting L2 before a timed call slow the call itself? (CUDA only)

The grader clears any persisting-L2 carve-out before each timed call (hack #20). This times a few
suite solutions, queued-flush protocol as in drkernel/env/measure/timing.py, with each way of clearing:
nothing, ``cudaDeviceGetLimit`` only, ``cudaDeviceSetLimit(PersistingL2CacheSize, 0)``,
``cudaCtxResetPersistingL2Cache``, and the grader's own resetter.

    python tests/benchmarks/diagnostics/l2_reset_cost.py
"""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # solution_speed, beside this file
sys.path.insert(0, str(ROOT))

from solution_speed import build_pair  # noqa: E402

from drkernel.env.tasks.suite import load_suite  # noqa: E402
from drkernel.env.measure.timing import persisting_l2_resetter  # noqa: E402

LIMIT = 0x06


def _cudart():
    torch.empty(1, device="cuda")
    for line in open("/proc/self/maps"):
        if "libcudart" in line:
            return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")


def main() -> int:
    lib = _cudart()
    lib.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    size = ctypes.c_size_t(0)
    modes = {
        "none": lambda: None,
        "get_limit": lambda: lib.cudaDeviceGetLimit(ctypes.byref(size), LIMIT),
        "set_limit_0": lambda: lib.cudaDeviceSetLimit(LIMIT, 0),
        "ctx_reset": lambda: lib.cudaCtxResetPersistingL2Cache(),
        "grader": persisting_l2_resetter(),
    }
    flush = torch.empty(256 << 18, device="cuda")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    for suite_dir, task_id in (("envs/fused_ops", "14_attention"), ("envs/fused_ops", "16_causal_attention"),
                               ("envs/fused_ops", "01_linear_relu"), ("envs/single_ops", "01_relu")):
        suite = load_suite(ROOT / suite_dir)
        _, _, model, x = build_pair(suite.task(task_id), suite.entry_point, suite.solutions_dir)
        line = [f"{task_id:22s}"]
        with torch.no_grad():
            model(*x)
            for name, fn in modes.items():
                ts = []
                for _ in range(15):
                    fn()
                    torch.cuda.synchronize()
                    flush.zero_()
                    e0.record()
                    model(*x)
                    e1.record()
                    torch.cuda.synchronize()
                    ts.append(e0.elapsed_time(e1))
                line.append(f"{name} {statistics.median(ts):.4f}")
        print(" | ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
