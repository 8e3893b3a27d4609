"""``drkernel serve`` on one CUDA machine against LocalGrader in-process, in one command:

    python tests/benchmarks/diagnostics/service_bench.py --out /tmp/drkernel-gpu/service_bench.json

1. **Throughput.** The same kernels (honest ReLU over 16M floats and a 2k matmul from tests/gpu,
   distinct seeds, the full protocol: correctness, timing, profiling) graded ``--n`` times by
   LocalGrader in this process and by a ``drkernel serve --device cuda --no-cache`` subprocess
   through RemoteGrader, each with its grader's own capacity and ``--concurrency`` submissions in
   flight, alternating (local, served, local, served, ... ``--rounds`` of each), each run starting
   with every spare worker of *both* paths ready (session 5's run waited only for the path about to
   run, so the other pool's refill ran beside it: 13.6% and 2.7% in two rounds). Service cost = 1 - served evals/s / in-process evals/s over all
   rounds (target < 5%). (One 48-evaluation burst per path, the first version of this script,
   measured 9.3% with the server's spares still starting and a burst's tail of +-5 s.)
2. **Latency.** ``--latency-n`` evaluations one at a time on each path: p50 / p99 seconds.
3. **CUDA faults.** Through the server: an illegal address (store at +2^40), a device-side assert
   (out-of-range index on the GPU) and an OOM (a 1 TiB allocation; then a fill-until-full loop),
   each followed by an honest evaluation that must pass, and /healthz still ready.

No internet needed (torch 2.11 + triton 3.6 as installed). Prints a table, writes ``--out`` JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

HERE = ROOT / "tests" / "gpu"  # its tasks/ and candidates/

DEVICE_ASSERT = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _relu(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        idx = torch.full((4,), x.numel() * 4, device=x.device, dtype=torch.long)
        out.view(-1)[idx] = 0.0  # index far out of range: device-side assert
        return out
'''

OOM_ALLOC = DEVICE_ASSERT.split("class ModelNew")[0] + '''
class ModelNew(nn.Module):
    def forward(self, x):
        hog = torch.empty(1 << 40, dtype=torch.uint8, device=x.device)  # 1 TiB
        out = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''

OOM_FILL = DEVICE_ASSERT.split("class ModelNew")[0] + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hog = []
        while True:  # fill the GPU in 1 GiB pieces until the allocator gives up
            self.hog.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    def forward(self, x):
        out = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def kernels():
    from drkernel.env.tasks.task import Task

    pairs = [("relu_big.py", "relu_honest.py"), ("matmul_2k.py", "matmul_honest.py")]
    return [(Task.from_file(HERE / "tasks" / t), (HERE / "candidates" / c).read_text(), t) for t, c in pairs]


def cpu_kernels():
    from drkernel.env.conformance import HONEST, PROBE_TASK
    from drkernel.env.tasks.task import Task

    return [(Task.from_source(PROBE_TASK, name="probe"), HONEST, "probe")]


async def throughput(grader, work, concurrency):
    limit = asyncio.Semaphore(concurrency)
    latencies, results = [], []

    async def one(task, source, seed):
        async with limit:
            t0 = time.monotonic()
            r = await grader.agrade(task, source, seed=seed)
            latencies.append(time.monotonic() - t0)
            results.append(r)

    t0 = time.monotonic()
    await asyncio.gather(*(one(*w) for w in work))
    wall = time.monotonic() - t0
    return {"n": len(work), "wall_s": wall, "evals_per_s": len(work) / wall, "p50_s": pct(latencies, 0.5),
            "p99_s": pct(latencies, 0.99), "passed": sum(r.passed for r in results)}


def sequential(grader, work):
    latencies = []
    for task, source, seed in work:
        t0 = time.monotonic()
        grader.grade(task, source, seed=seed)
        latencies.append(time.monotonic() - t0)
    return {"n": len(work), "p50_s": pct(latencies, 0.5), "p99_s": pct(latencies, 0.99),
            "mean_s": statistics.mean(latencies), "latencies_s": latencies}


def start_server(state: Path, port: int, args) -> subprocess.Popen:
    import httpx

    cmd = [sys.executable, "-m", "drkernel", "serve", "--device", args.device, "--port", str(port),
           "--state-dir", str(state), "--no-cache", "--log-level", "warning"]
    if args.device == "cpu":
        cmd.append("--cpu-fast")
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.Popen(cmd, env=env, stdout=open(state / "server.log", "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {(state / 'server.log').read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("server not ready in 600 s")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=48, help="evaluations per throughput run")
    p.add_argument("--latency-n", type=int, default=10, help="sequential evaluations per latency run")
    p.add_argument("--rounds", type=int, default=2, help="throughput runs of each path, alternating")
    p.add_argument("--workers", type=int, default=None, help="grader capacity on both paths (default: LocalGrader's)")
    p.add_argument("--concurrency", type=int, default=None, help="in flight (default: 2 x capacity)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a smoke run of this script on the interpreter (probe kernel, no fault stage)")
    p.add_argument("--out", default="/tmp/drkernel-gpu/service_bench.json")
    args = p.parse_args(argv)

    import httpx
    import torch

    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader
    from drkernel.serve.remote import RemoteGrader
    cuda = args.device == "cuda"
    assert torch.cuda.is_available() or not cuda, "needs a CUDA device (or --device cpu for a smoke run)"
    pairs = kernels() if cuda else cpu_kernels()
    work = [(task, src, 1000 + i) for i in range(args.n) for task, src, _ in [pairs[i % len(pairs)]]]
    lat_work = [(task, src, 5000 + i) for i in range(args.latency_n) for task, src, _ in [pairs[i % len(pairs)]]]
    report: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
    config = EvalConfig(device="cuda") if cuda else cpu_fast(EvalConfig(device="cpu"))

    # -- both paths, alternating -----------------------------------------------------------------
    local = LocalGrader(config, capacity=args.workers)
    capacity = local.capacity
    concurrency = args.concurrency or 2 * capacity
    for task, src, _ in pairs:  # Triton caches and warm processes, same state for both paths
        local.grade(task, src, seed=1)
    state = Path(tempfile.mkdtemp(prefix="service-bench-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args.workers = capacity
    proc = start_server(state, port, args)
    url = f"http://127.0.0.1:{port}"

    def local_spares_ready() -> bool:
        return all(local.pool.ready_count(d) >= local.pool.spares for d in local.devices)

    def served_spares_ready() -> bool:
        text = httpx.get(url + "/metrics", timeout=5).text
        line = next((x for x in text.splitlines() if x.startswith("drkernel_warm_workers_ready ")), "0 0")
        return float(line.split()[1]) >= local.pool.spares * len(local.devices)

    def both_ready() -> bool:
        return local_spares_ready() and served_spares_ready()

    def wait(ready) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not ready():
            time.sleep(0.5)

    def dump() -> None:  # after every phase: a run cut off by its time limit still leaves its figures
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2, default=str))

    try:
        remote = RemoteGrader(url, timeout_s=3600)
        for task, src, _ in pairs:
            remote.grade(task, src, seed=2)
        runs: dict[str, list] = {"local": [], "served": []}
        for r in range(args.rounds):
            shifted = [(t, src, seed + 100_000 * r) for t, src, seed in work]
            # Both pools full before either run: a pool refilling after its own run starts processes
            # (CPU, CUDA contexts) beside the other path's run, which would be charged to that path.
            wait(both_ready)
            runs["local"].append(asyncio.run(throughput(local, shifted, concurrency)))
            wait(both_ready)
            runs["served"].append(asyncio.run(throughput(remote, shifted, concurrency)))
            print(f"round {r}: local {runs['local'][-1]['evals_per_s']:.3f}/s, "
                  f"served {runs['served'][-1]['evals_per_s']:.3f}/s", flush=True)
            report["runs"] = runs
            dump()
        for name, rs in runs.items():
            n, wall = sum(x["n"] for x in rs), sum(x["wall_s"] for x in rs)
            report[name] = {"n": n, "wall_s": wall, "evals_per_s": n / wall, "rounds": rs,
                            "p50_s": statistics.median(x["p50_s"] for x in rs),
                            "p99_s": max(x["p99_s"] for x in rs), "passed": sum(x["passed"] for x in rs)}
        wait(local_spares_ready)
        report["local_latency"] = sequential(local, lat_work)
        local.close()
        wait(served_spares_ready)
        report["served_latency"] = sequential(remote, lat_work)
        dump()

        # -- CUDA faults ------------------------------------------------------------------------
        relu_task, relu_src, _ = pairs[0]
        faults = {} if not cuda else {"illegal_address": (HERE / "candidates" / "relu_cuda_fault.py").read_text(),
                  "device_assert": DEVICE_ASSERT, "oom_alloc": OOM_ALLOC, "oom_fill": OOM_FILL}
        report["faults"] = {}
        for k, (name, src) in enumerate(faults.items()):
            bad = remote.grade(relu_task, src, seed=9000 + k, options={"measure_performance": False})
            good = remote.grade(relu_task, relu_src, seed=9100 + k)
            ready = httpx.get(url + "/healthz", timeout=5).json().get("ready")
            report["faults"][name] = {"fault_passed": bad.passed, "fault_error": bad.error and bad.error.to_dict(),
                                      "next_passed": good.passed, "server_ready": ready,
                                      "ok": (not bad.passed) and good.passed and bool(ready)}
        metrics = httpx.get(url + "/metrics", timeout=5).text
        report["metrics_tail"] = [line for line in metrics.splitlines()
                                  if line.startswith(("drkernel_evaluations_total", "drkernel_worker"))]
        remote.close()
    finally:
        local.close()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()

    report["capacity"] = capacity
    report["concurrency"] = concurrency
    report["service_cost"] = 1 - report["served"]["evals_per_s"] / report["local"]["evals_per_s"]
    report["ok"] = (report["service_cost"] < 0.05 and all(f["ok"] for f in report["faults"].values())
                    and (len(report["faults"]) == 4 or not cuda)
                    and report["local"]["passed"] == report["served"]["passed"] == args.n * args.rounds)

    print(f"device {report['device']}  capacity {capacity}  concurrency {concurrency}  n {args.n}")
    print(f"{'path':12} {'evals/s':>8} {'p50 s':>7} {'p99 s':>7} {'seq p50':>8} {'seq p99':>8} {'passed':>7}")
    for name in ("local", "served"):
        t, lat = report[name], report[f"{name}_latency"]
        print(f"{name:12} {t['evals_per_s']:8.2f} {t['p50_s']:7.2f} {t['p99_s']:7.2f} {lat['p50_s']:8.2f} "
              f"{lat['p99_s']:8.2f} {t['passed']:4d}/{t['n']}")
    print(f"service cost: {100 * report['service_cost']:.1f}% (target < 5%)")
    print(f"{'fault':16} {'fault verdict':40} {'next passed':>11} {'ready':>6}")
    for name, f in report["faults"].items():
        err = (f["fault_error"] or {}).get("message", "passed?!")[:40]
        print(f"{name:16} {err:40} {str(f['next_passed']):>11} {str(f['server_ready']):>6}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print("wrote", args.out, "OK" if report["ok"] else "NOT OK")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
