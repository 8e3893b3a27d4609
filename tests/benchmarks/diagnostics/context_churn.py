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


def _said(data: bytes) -> dict | None:
    """The child's one line ({"ctx": s, "work": s}), or None if it said nothing readable."""
    try:
        return json.loads(data.decode().splitlines()[0])
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def run_variant(name: str, gpus: int, concurrency: int, seconds: float) -> dict:
    """Keep ``concurrency`` children alive for ``seconds``; a lifecycle counts when its child said
    its line and exited cleanly (status 0, or killed by us in the kill variant). Rates: completions
    within the window per second of it (``per_s``), and Little's law, ``concurrency / mean
    lifecycle`` (``little_per_s``: the steady rate, without the ramp and the drain)."""
    env, heavy, kill = VARIANTS[name]
    live: dict[int, tuple[int, float]] = {}  # pid -> (read fd, fork time)
    said: dict[int, tuple[float, dict | None]] = {}  # pid -> (when, what)
    ctx, work, teardown, lifecycle = [], [], [], []
    started = failed = in_window = 0
    t_start = time.monotonic()
    t_end = t_start + seconds

    def hear(pid: int, r: int) -> None:
        data = os.read(r, 4096)
        said[pid] = (time.monotonic(), _said(data))
        if kill:
            os.kill(pid, signal.SIGKILL)

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
        for pid, (r, _) in list(live.items()):  # what children said (one line each, then they exit)
            if pid not in said and select.select([r], [], [], 0)[0]:
                hear(pid, r)
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
        if pid not in live:
            time.sleep(0.005)
            continue
        r, t_fork = live.pop(pid)
        if pid not in said and select.select([r], [], [], 0)[0]:
            hear(pid, r)  # it wrote and exited between the scan and the reap
        os.close(r)
        now = time.monotonic()
        when, what = said.pop(pid, (None, None))
        clean = os.waitstatus_to_exitcode(status) in ((0, -signal.SIGKILL) if kill else (0,))
        if when is None or what is None or not clean:
            failed += 1
            continue
        ctx.append(what["ctx"])
        work.append(what["work"])
        teardown.append(now - when)
        lifecycle.append(now - t_fork)
        in_window += now <= t_end
    mean = lambda xs: round(statistics.fmean(xs), 3) if xs else None  # noqa: E731
    return {"variant": name, "gpus": gpus, "concurrency": concurrency, "lifecycles": len(lifecycle),
            "failed": failed, "per_s": round(in_window / seconds, 2),
            "little_per_s": round(concurrency / statistics.fmean(lifecycle), 2) if lifecycle else None,
            "ctx_s": mean(ctx), "work_s": mean(work), "teardown_s": mean(teardown), "lifecycle_s": mean(lifecycle)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--variants", default="ctx,worker,worker-1conn,worker-kill")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch  # the template's import, before any fork: no CUDA context here

    del torch

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
