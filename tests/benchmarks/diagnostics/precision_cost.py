"""What the precision-aware verdict costs the grader: the float64 oracle's forward against the
reference's, and the oracle comparison (drkernel.env.judge.precision.judge) against the scale-aware one
(drkernel.env.judge.compare.compare_outputs), on one output of N elements.

    python tests/benchmarks/diagnostics/precision_cost.py [--device cuda] [--n 67108864] [--out cost.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from drkernel.env.judge.compare import compare_outputs
from drkernel.env.tasks.oracle import evaluate_float64, widen_inputs, widen_model
from drkernel.env.judge.precision import judge


def _ms(fn, device: str, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, default=1 << 26)
    ap.add_argument("--gemm", type=int, default=4096)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev, rows = a.device, {}
    g = torch.Generator(device=dev).manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        o = torch.randn(a.n, generator=g, device=dev, dtype=torch.float64)
        r = o.to(dtype)
        c = (o * (1 + 1e-7 * torch.randn(a.n, generator=g, device=dev, dtype=torch.float64))).to(dtype)
        name = str(dtype).replace("torch.", "")
        rows[f"judge_{name}_ms"] = _ms(lambda: judge(c, r, o), dev)
        rows[f"compare_outputs_{name}_ms"] = _ms(lambda: compare_outputs(c, r, 1e-4, 1e-4), dev)
        del o, r, c
    n = a.gemm
    model = torch.nn.Linear(n, n, bias=False).to(dev)
    x = [torch.randn(n, n, generator=g, device=dev)]
    wide, xs = widen_model(model), widen_inputs(x)
    with torch.no_grad():
        rows["gemm_fp32_forward_ms"] = _ms(lambda: model(*x), dev)
    rows["gemm_oracle_forward_ms"] = _ms(lambda: evaluate_float64(wide, xs), dev)
    rows["gemm_widen_model_ms"] = _ms(lambda: widen_model(model), dev)
    rows.update(device=torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu", n=a.n, gemm=n)
    print(json.dumps(rows, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
