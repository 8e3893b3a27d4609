"""How long one candidate output takes from the worker's GPU to the grader's: the file path
(through a pinned chunk into /dev/shm and back) against the output stage (a sealed shared memfd,
page-locked on both sides, :mod:`drkernel.env.process.staging`), with 1..N copies running at once (each
in its own thread, as evaluations in flight do; both processes' sides run in this one).

    python tests/benchmarks/diagnostics/output_transfer.py --mb 256 --concurrency 1,8 --out transfer.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from drkernel.env.process import tensor_io
from drkernel.env.process.sandbox import workdir_root_default
from drkernel.env.process.staging import Stage


def one_path(kind: str, x: torch.Tensor, repeats: int) -> list[float]:
    """Seconds per output (write + read) of ``repeats`` outputs through one path."""
    cuda = x.is_cuda
    times = []
    with tempfile.TemporaryDirectory(dir=workdir_root_default()) as d:
        grader = worker = None
        if kind == "stage":
            grader = Stage.create()
            worker = Stage.attach(os.dup(grader.fd))
            nbytes = x.numel() * x.element_size()
            grader.reserve(nbytes, cuda)
            worker.reserve(nbytes, cuda)
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                if worker is not None:
                    worker.rewind()
                desc = tensor_io.write_tensor(x, Path(d), "out", worker)
                y = tensor_io.read_tensor(desc, Path(d), x.device, stage=grader)
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                assert y.shape == x.shape
                del y
                (Path(d) / "out.bin").unlink(missing_ok=True)
        finally:
            for s in (worker, grader):
                if s is not None:
                    s.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256, help="output size in MB (float32)")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for conc in [int(c) for c in a.concurrency.split(",")]:
        xs = [torch.randn((a.mb << 20) // 4, device=a.device) for _ in range(conc)]
        for kind in ("file", "stage"):
            one_path(kind, xs[0], 1)  # warm: pinned chunk, first registration
            results: list[list[float]] = [[] for _ in range(conc)]
            threads = [threading.Thread(target=lambda i=i: results[i].extend(one_path(kind, xs[i], a.repeats)))
                       for i in range(conc)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            per = [s for r in results for s in r]
            row = {"path": kind, "mb": a.mb, "concurrency": conc, "median_s": statistics.median(per),
                   "max_s": max(per), "wall_s": wall, "gb_per_s": conc * a.repeats * a.mb / 1024 / wall}
            rows.append(row)
            print(f"{kind:5s} {a.mb} MB x{conc:<2d}: {row['median_s'] * 1e3:7.1f} ms per output (median), "
                  f"{row['gb_per_s']:.1f} GB/s in all", flush=True)
        del xs
    if a.out:
        Path(a.out).write_text(json.dumps({"device": a.device, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
