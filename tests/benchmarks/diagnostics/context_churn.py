"""How many GPU process lifecycles (fork, CUDA context, a little work, exit) can one host run a
second, and does the rate grow with the GPUs? (GPU machine.)

    python tests/benchmarks/diagnostics/context_churn.py --gpus 4 --concurrency 16 --seconds 20

The grader runs each candidate in a process of its own, forked from a template that has imported
torch (drkernel.env.process.zygote), so every evaluation creates one CUDA context and tears one down.
This keeps ``--concurrency`` such children alive (child i sees GPU i mod ``--gpus``, as the grader's
workers do) for ``--seconds`` per variant and reports completed lifecycles per second, the mean
context creation, the mean of the child's work and the mean time from the child's last word to its
reaping (the teardown: the kernel unmapping the child's memory and the driver freeing its context).

Variants (``--variants``): ``ctx`` (context and one tiny tensor), ``worker`` (as a grader worker's
warm start: the context, a 2 x L2 flush buffer and one CUDA profiler session), ``worker-1conn``
(``worker`` with CUDA_DEVICE_MAX_CONNECTIONS=1: fewer hardware channels to create) and ``worker-kill``
(``worker``, then SIGKILL from the parent instead of a normal exit).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import sys
import time

VARIANTS = {
    "ctx": ({}, False, False),
    "worker": ({}, True, False),
    "worker-1conn": ({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, True, False),
    "worker-kill": ({}, True, True),
}


def child(gpu: int, env: dict[str, str], heavy: bool, wfd: int, wait_kill: bool) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    os.environ.update(env)
    import torch

    t0 = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    if heavy:
        from torch.profiler import ProfilerActivity, profile

        l2 = torch.cuda.get_device_properties(0).L2_cache_size or (50 << 20)
        flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
        with profile(activities=[ProfilerActivity.CUDA]):
            flush.zero_()
            torch.cuda.synchronize()
    t2 = time.perf_counter()
    os.write(wfd, (json.dumps({"ctx": t1 - t0, "work": t2 - t1}) + "\n").encode())
    os.close(wfd)
    if wait_kill:
        time.sleep(60)
    os._exit(0)


def run_variant(name: str, gpus: int, concurrency: int, seconds: float) -> dict:
    env, heavy, kill = VARIANTS[name]
    live: dict[int, tuple[int, float]] = {}  # pid -> (read fd, fork time)
    said: dict[int, float] = {}
    ctx, work, teardown, lifecycle = [], [], [], []
    started = 0
    t_start = time.monotonic()
    t_end = t_start + seconds
    while True:
        while time.monotonic() < t_end and len(live) < concurrency:
            r, w = os.pipe()
            t_fork = time.monotonic()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    child(started % gpus, env, heavy, w, kill)
                finally:
                    os._exit(1)
            os.close(w)
            live[pid] = (r, t_fork)
            started += 1
        if not live:
            break
        # read whatever children said (blocking reads are short: a child writes one line then exits)
        for pid, (r, t_fork) in list(live.items()):
            if pid in said:
                continue
            if select.select([r], [], [], 0)[0]:
                data = os.read(r, 4096)
                said[pid] = time.monotonic()
                if data:
                    d = json.loads(data.decode().splitlines()[0])
                    ctx.append(d["ctx"])
                    work.append(d["work"])
                if kill:
                    os.kill(pid, signal.SIGKILL)
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid in live:
            r, t_fork = live.pop(pid)
            os.close(r)
            now = time.monotonic()
            if pid in said:
                teardown.append(now - said.pop(pid))
                lifecycle.append(now - t_fork)
        else:
            time.sleep(0.005)
    n = len(lifecycle)
    elapsed = time.monotonic() - t_start
    mean = lambda xs: round(statistics.fmean(xs), 3) if xs else None  # noqa: E731
    return {"variant": name, "gpus": gpus, "concurrency": concurrency, "lifecycles": n,
            "per_s": round(n / elapsed, 2), "ctx_s": mean(ctx), "work_s": mean(work), "teardown_s": mean(teardown),
            "lifecycle_s": mean(lifecycle)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--variants", default="ctx,worker,worker-1conn,worker-kill")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch  # noqa: F401  (the template's import, before any fork: no CUDA context here)

    rows = []
    for name in args.variants.split(","):
        row = run_variant(name, args.gpus, args.concurrency, args.seconds)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
