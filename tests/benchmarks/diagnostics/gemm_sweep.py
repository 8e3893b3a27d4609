"""fp32-accurate Triton GEMM tilings on the suites' shapes, against cuBLAS fp32 (CUDA only).

The suites grade fp32 at 1e-4 (relative to the output's RMS) with TF32 off in the reference, so a
GEMM solution must be fp32-accurate. Triton offers two ways: ``input_precision="ieee"`` (FMA, no
tensor cores) and ``"tf32x3"`` (each operand split into a TF32 high and low part, three tensor-core
products: hi*hi + hi*lo + lo*hi, error close to fp32). This sweep times both over a few tilings for
every GEMM shape in the suites and reports the error in units of the grader's tolerance.

    python tests/benchmarks/diagnostics/gemm_sweep.py --out sweep.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
          PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    npm, npn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP_M * npn
    first = (pid // width) * GROUP_M
    gm = tl.minimum(npm - first, GROUP_M)
    pm = first + (pid % width) % gm
    pn = (pid % width) // gm
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


# (M, N, K, layout of B): "nk" = a Linear weight (N, K) used as W^T, "kn" = a plain (K, N) matrix.
SHAPES = {
    "single/18 4096^3": (4096, 4096, 4096, "kn"),
    "single/19 bmm slice": (512 * 32, 768, 1024, "kn"),
    "single/21 A@B.T": (2048, 3072, 4096, "nk"),
    "fused/01,05 linear": (4096, 4096, 4096, "nk"),
    "fused/02 linear": (4096, 8192, 4096, "nk"),
    "fused/03 linear": (8192, 4096, 2048, "nk"),
    "fused/04,21 linear": (8192, 2048, 4096, "nk"),
    "fused/06 linear": (8192, 4096, 8192, "nk"),
    "fused/07 linear": (4096, 4096, 8192, "nk"),
    "fused/08 up": (4096, 8192, 2048, "nk"),
    "fused/08 down": (4096, 2048, 8192, "nk"),
    "fused/12 linear": (8192, 1024, 2048, "nk"),
    "fused/18,28 linear": (8192, 4096, 4096, "nk"),
    "fused/19 linear": (8192, 1024, 8192, "nk"),
    "fused/20,27 linear": (8192, 8192, 2048, "nk"),
}

# (BM, BN, BK, num_warps, num_stages)
CONFIGS = [
    (128, 256, 16, 8, 3),
    (128, 128, 32, 8, 3),
    (128, 128, 32, 4, 4),
    (128, 256, 32, 8, 3),
    (256, 128, 32, 8, 3),
    (128, 128, 64, 8, 3),
    (64, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
]


def _bench(fn, flush, reps: int = 15) -> float:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        flush.zero_()
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        out.append(e0.elapsed_time(e1))
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default=None, help="substring filter on shape names")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = torch.empty(256 << 18, device="cuda")
    rows = []
    for name, (M, N, K, layout) in SHAPES.items():
        if a.shapes and a.shapes not in name:
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        A = torch.randn(M, K, device="cuda", generator=g)
        Bm = torch.randn((N, K) if layout == "nk" else (K, N), device="cuda", generator=g) / K ** 0.5
        Bt = Bm.t() if layout == "nk" else Bm  # (K, N) view
        want = (A.double() @ Bt.double())
        rms = want.pow(2).mean().sqrt().item()
        tol = 1e-4 * rms + 1e-4 * want.abs()
        C = torch.empty(M, N, device="cuda")
        flops = 2 * M * N * K
        t_cublas = _bench(lambda: torch.matmul(A, Bt), flush)
        err_cublas = ((torch.matmul(A, Bt).double() - want).abs() / tol).max().item()
        row = {"shape": name, "MNK": [M, N, K], "cublas_ms": t_cublas, "cublas_err_over_tol": err_cublas,
               "configs": []}
        print(f"{name:24s} cuBLAS fp32 {t_cublas:7.3f} ms ({flops / t_cublas / 1e9:6.1f} TFLOP/s) "
              f"err/tol {err_cublas:.3f}", flush=True)
        for prec in ("tf32x3", "ieee"):
            for (bm, bn, bk, w, s) in CONFIGS if prec == "tf32x3" else CONFIGS[:1]:
                grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

                def run():
                    _gemm[grid](A, Bt, C, M, N, K, A.stride(0), A.stride(1), Bt.stride(0), Bt.stride(1),
                                C.stride(0), BM=bm, BN=bn, BK=bk, GROUP_M=8, PRECISION=prec,
                                num_warps=w, num_stages=s)
                try:
                    t = _bench(run, flush)
                    err = ((C.double() - want).abs() / tol).max().item()
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
                    print(f"    {prec} {bm}x{bn}x{bk} w{w} s{s}: {type(exc).__name__}")
                    continue
                row["configs"].append({"precision": prec, "config": [bm, bn, bk, w, s], "ms": t,
                                       "err_over_tol": err, "vs_cublas": t_cublas / t})
                print(f"    {prec:6s} {bm:3d}x{bn:3d}x{bk:2d} w{w} s{s}: {t:7.3f} ms  "
                      f"{t_cublas / t:5.2f}x cuBLAS  err/tol {err:.3f}", flush=True)
        rows.append(row)
        del A, Bm, Bt, want, tol, C
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
