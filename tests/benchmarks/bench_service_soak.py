"""Soak of ``drkernel serve`` with real grading under faults: every submission answered exactly once,
with the verdict a quiet run gives (issue 25).

    python tests/benchmarks/bench_service_soak.py                              # CPU, 1,000 submissions
    python tests/benchmarks/bench_service_soak.py --device cuda --count 200    # tests/gpu/run.sh service_soak

Submissions (small tasks: the conformance probe, 257 floats, and a 300-float add; every 20 in
this order): 6 honest, 2 wrong, 2 NaN output, 2 Inf output, 1 hanging (sleeps in forward; a short
``call_timeout_s`` of its own), 2 crashing (``os._exit``), 1 memory-hungry (past
``memory_limit_mb``), 1 hacked (torch instead of a kernel), and 3 repeats of earlier submissions
(same task, code, seed and options under a new id: a verdict the cache may reuse, or a transient
outcome it must not).

1. **Quiet run**: the distinct submissions through ``LocalGrader`` in-process, nothing killed.
2. **Soak**: one ``drkernel serve`` (result cache on, ``--state-dir`` in a temp dir), ``--clients``
   client threads, each with its own ``RemoteGrader`` and ``--per-client`` submissions in
   flight. Every ``--kill-every`` answers, every candidate worker process of the server is
   SIGKILLed (the busy ones die mid-evaluation); after ``--restart-at`` of the answers, the server
   and all its processes are SIGKILLed and the server restarted on the same state dir.

3. **OpenRLHF route** (``--openrlhf N``, default 64; 0: off): the first N submissions as one batch
   in OpenRLHF's remote reward shape (``POST /v1/openrlhf/reward``: query = prompt + the kernel in a
   fenced block, label = the task, seed and options) to a fresh server, posted the way OpenRLHF's
   client does (the same payload again after any error); every worker is SIGKILLed once and, after
   a quarter of the batch's jobs are answered, the server too, then restarted on its state dir.
   Checks: one answer, each reward equal to ``drkernel.rewards`` of the quiet run's result (what
   ``/v1/evaluate`` answers), one job per distinct sample in the store, all answered, and a resent
   batch answered with the same rewards and no new job.

Checks (exit 0 only when all hold): every submission got exactly one answer, no environment
failure; each verdict (passed, compiled, correct, hacked, error stage) equals the quiet run's;
NaN/Inf answers decode to ``max_abs_err == inf``; the job store holds exactly the submitted ids,
all answered; no cached answer is a transient outcome. Timings may differ between the runs and are
not compared. Prints counts and evaluations/min and writes ``--out`` JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from drkernel.env.conformance import CRASH, HONEST, MEMORY_HOG, PROBE_TASK, WRONG, _KERNEL  # noqa: E402
from drkernel.env.result import EnvironmentFailure  # noqa: E402
from drkernel.env.tasks.task import Task  # noqa: E402
from tests.service.batch import HANG, INF_OUTPUT, NAN_OUTPUT  # noqa: E402

ADD_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x + y

def get_inputs():
    return [torch.randn(300), torch.randn(300)]

def get_init_inputs():
    return []
'''

_ADD_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        _add[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
        return out
'''
ADD_HONEST = _ADD_KERNEL
ADD_WRONG = _ADD_KERNEL.replace("+ tl.load(y_ptr", "- tl.load(y_ptr")
TORCH_FALLBACK = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2.0  # no kernel launched
'''

#: Every 20 submissions: (kind, task, candidate); "repeat" re-sends an earlier submission.
PATTERN = [("honest", "probe", HONEST), ("honest", "add", ADD_HONEST), ("wrong", "probe", WRONG),
           ("nan", "probe", NAN_OUTPUT), ("crash", "probe", CRASH), ("honest", "probe", HONEST),
           ("inf", "probe", INF_OUTPUT), ("repeat", None, None), ("hang", "probe", HANG),
           ("honest", "add", ADD_HONEST), ("memory", "probe", MEMORY_HOG), ("wrong", "add", ADD_WRONG),
           ("repeat", None, None), ("nan", "probe", NAN_OUTPUT), ("honest", "probe", HONEST),
           ("hacked", "probe", TORCH_FALLBACK), ("inf", "probe", INF_OUTPUT), ("crash", "probe", CRASH),
           ("repeat", None, None), ("honest", "add", ADD_HONEST)]


def submissions(count: int, device: str, seed: int = 0) -> list[dict]:
    """``count`` submissions: ``{kind, task, source, seed, options, repeat_of}``."""
    tasks = {"probe": Task.from_source(PROBE_TASK, name="probe"), "add": Task.from_source(ADD_TASK, name="add")}
    hang_s = 5.0
    base = {"measure_performance": False, "profile": False, "trials_per_distribution": 1,
            "distributions": ["native"], "determinism_check": False, "load_timeout_s": 120.0,
            "call_timeout_s": 120.0, "memory_limit_mb": 1200}
    rng = random.Random(seed)
    subs: list[dict] = []
    for i in range(count):
        kind, task, source = PATTERN[i % len(PATTERN)]
        if kind == "repeat" and subs:
            j = rng.randrange(len(subs))
            original = subs[j]["repeat_of"] if subs[j]["repeat_of"] is not None else j
            subs.append({**subs[original], "repeat_of": original})
            continue
        if kind == "repeat":
            kind, task, source = PATTERN[0]
        options = dict(base, call_timeout_s=hang_s) if kind == "hang" else dict(base)
        subs.append({"kind": kind, "task": tasks[task], "source": source, "seed": 1000 + i, "options": options,
                     "repeat_of": None})
    return subs


def distinct_key(sub: dict) -> tuple:
    return (sub["task"].source, sub["source"], sub["seed"], json.dumps(sub["options"], sort_keys=True))


def verdict(result) -> tuple:
    """What must not differ between the soak and the quiet run."""
    return (result.passed, result.compiled, result.correct, result.hacked, result.error.stage if result.error else None)


# -- the quiet run --------------------------------------------------------------------------------------
def quiet_run(subs: list[dict], device: str, workers: int, rewards: dict | None = None) -> tuple[dict, float, int]:
    """Verdicts of the distinct submissions through LocalGrader in-process, nothing killed (and
    their recipe rewards in ``rewards``, by :func:`distinct_key`)."""
    from drkernel.rewards import compute_reward

    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader

    distinct: dict[tuple, dict] = {}
    for sub in subs:
        distinct.setdefault(distinct_key(sub), sub)
    config = EvalConfig(device=device)
    grader = LocalGrader(cpu_fast(config) if device == "cpu" else config, capacity=workers)
    out: dict[tuple, tuple] = {}

    async def run():
        limit = asyncio.Semaphore(2 * workers)

        async def one(key, sub):
            async with limit:
                r = await grader.agrade(sub["task"], sub["source"], seed=sub["seed"], options=sub["options"])
                out[key] = verdict(r)
                if rewards is not None:
                    rewards[key] = compute_reward(r)

        await asyncio.gather(*(one(k, s) for k, s in distinct.items()))

    t0 = time.monotonic()
    try:
        asyncio.run(run())
    finally:
        grader.close()
    return out, time.monotonic() - t0, len(distinct)


# -- faults -----------------------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def server_processes(server_pid: int) -> tuple[list[int], list[int]]:
    """``(zygotes, workers)`` of a server: its zygotes are its children running drkernel.env.process.zygote;
    the candidate workers are the zygotes' children (forked, so same command line)."""
    kids = _children()
    zygotes = [p for p in kids.get(server_pid, []) if "drkernel.env.process.zygote" in _cmdline(p)]
    workers = [w for z in zygotes for w in kids.get(z, [])]
    return zygotes, workers


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(pids) -> int:
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except ProcessLookupError:
            pass
    return n


def scrape(url: str) -> dict[str, float]:
    import httpx

    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


# -- the soak --------------------------------------------------------------------------------------------
def soak(subs: list[dict], args) -> dict:
    from drkernel.serve.remote import RemoteGrader
    from tests.service.conftest import Server

    state = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    extra = ["--device", args.device, "--workers", str(args.workers), "--queue-size", "64"]
    if args.device == "cpu":
        extra.append("--cpu-fast")
    server = Server(state, *extra).start(timeout=600)
    answers: dict[int, list] = {i: [] for i in range(len(subs))}
    latencies: list[float] = []
    lock = threading.Lock()
    answered = [0]
    events: list[dict] = []
    metrics_before_restart: dict[str, float] = {}
    stop = threading.Event()
    restart_after = int(args.restart_at * len(subs)) if args.restart_at > 0 else None

    def faults():
        if args.kill_every is None:
            args.kill_every = max(5, min(100, args.count // 4))
        next_kill = args.kill_every
        restarted = restart_after is None
        while not stop.wait(0.1):
            n = answered[0]
            if not restarted and n >= restart_after:
                restarted = True
                metrics_before_restart.update(scrape(server.url))
                doomed = descendants(server.proc.pid)
                server.kill()
                killed = _kill(doomed)
                events.append({"event": "server_killed", "after_answers": n, "processes_killed": 1 + killed})
                time.sleep(1.0)
                t0 = time.monotonic()
                server.start(timeout=600)
                events.append({"event": "server_restarted", "after_answers": answered[0],
                               "restart_s": round(time.monotonic() - t0, 1)})
            if args.kill_every and n >= next_kill:
                next_kill += args.kill_every
                if server.proc is None or server.proc.poll() is not None:
                    continue
                _, workers = server_processes(server.proc.pid)
                events.append({"event": "workers_killed", "after_answers": n, "workers": _kill(workers)})

    def client(c: int) -> None:
        grader = RemoteGrader(server.url, backoff_s=0.1, max_backoff_s=2.0, poll_s=10.0, health_interval_s=1.0,
                              timeout_s=3600)
        mine = [i for i in range(len(subs)) if i % args.clients == c]

        async def one(i, limit):
            sub = subs[i]
            async with limit:
                t0 = time.monotonic()
                try:
                    answer = await grader.agrade(sub["task"], sub["source"], seed=sub["seed"], options=sub["options"])
                except EnvironmentFailure as exc:
                    answer = exc
                with lock:
                    answers[i].append(answer)
                    latencies.append(time.monotonic() - t0)
                    answered[0] += 1

        async def run():
            limit = asyncio.Semaphore(args.per_client)
            await asyncio.gather(*(one(i, limit) for i in mine))

        try:
            asyncio.run(run())
        finally:
            stats.append(dict(grader.stats))
            grader.close()

    stats: list[dict] = []
    fault_thread = threading.Thread(target=faults, daemon=True)
    clients = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    t0 = time.monotonic()
    fault_thread.start()
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    fault_thread.join()
    try:
        server.drain(timeout=600)
    except RuntimeError as exc:
        print("warning:", exc)
    metrics_after = scrape(server.url)
    leftovers = descendants(server.proc.pid)
    server.stop()
    _kill(p for p in leftovers if "drkernel.env.process.zygote" in _cmdline(p))

    db = sqlite3.connect(state / "jobs.sqlite")
    rows = list(db.execute("SELECT id, state, cached, result FROM jobs"))
    db.close()
    return {"answers": answers, "latencies": latencies, "wall_s": wall, "events": events, "client_stats": stats,
            "rows": rows, "metrics": [metrics_before_restart, metrics_after], "state_dir": str(state)}


# -- the OpenRLHF route --------------------------------------------------------------------------------
def openrlhf_leg(subs: list[dict], quiet_rewards: dict, args) -> dict:
    """The first ``args.openrlhf`` submissions as one OpenRLHF batch, with a worker kill and a
    server SIGKILL + restart while it is graded (module doc, step 3)."""
    import httpx

    from drkernel.integrations.openrlhf import encode_label
    from tests.service.conftest import Server

    batch = subs[:args.openrlhf]
    prompt = "<|im_start|>user\nWrite ModelNew.<|im_end|>\n<|im_start|>assistant\n"
    payload = {"query": [f"{prompt}Here it is.\n```python\n{s['source'].strip()}\n```<|im_end|>" for s in batch],
               "prompts": [prompt] * len(batch),
               "labels": [encode_label(s["task"].source, task_name=s["task"].name, seed=s["seed"],
                                       options=s["options"]) for s in batch]}
    state = Path(tempfile.mkdtemp(prefix="bench-soak-orm-"))
    extra = ["--device", args.device, "--workers", str(args.workers), "--queue-size", "64"]
    if args.device == "cpu":
        extra.append("--cpu-fast")
    server = Server(state, *extra).start(timeout=600)
    url = server.url + "/v1/openrlhf/reward"
    answers: list[dict] = []
    posts = [0]

    def post() -> dict:
        while True:  # OpenRLHF's client: the same payload again after any error
            posts[0] += 1
            try:
                r = httpx.post(url, json=payload, timeout=3600)
                r.raise_for_status()
                return r.json()
            except httpx.HTTPError:
                time.sleep(1.0)

    def rows() -> list[tuple]:
        db = sqlite3.connect(state / "jobs.sqlite")
        try:
            return list(db.execute("SELECT id, state, attempts FROM jobs"))
        finally:
            db.close()

    client = threading.Thread(target=lambda: answers.append(post()))
    t0 = time.monotonic()
    client.start()
    events: list[dict] = []
    workers_killed = False
    while client.is_alive():
        time.sleep(0.2)
        done = sum(r[1] == "done" for r in rows()) if (state / "jobs.sqlite").exists() else 0
        if not workers_killed and done >= 1:
            workers_killed = True
            _, workers = server_processes(server.proc.pid)
            events.append({"event": "workers_killed", "after_jobs": done, "workers": _kill(workers)})
        if done >= max(1, len(batch) // 4):
            doomed = descendants(server.proc.pid)
            server.kill()
            events.append({"event": "server_killed", "after_jobs": done, "processes_killed": 1 + _kill(doomed)})
            time.sleep(1.0)
            server.start(timeout=600)
            events.append({"event": "server_restarted"})
            break
    client.join()
    wall = time.monotonic() - t0
    before_resend = rows()
    resent = post()
    after_resend = rows()
    leftovers = descendants(server.proc.pid)
    server.stop()
    _kill(p for p in leftovers if "drkernel.env.process.zygote" in _cmdline(p))

    answer = answers[0]
    want = [quiet_rewards.get(distinct_key(s)) for s in batch]
    mismatches = [{"i": i, "kind": s["kind"], "route": got, "quiet": w}
                  for i, (s, got, w) in enumerate(zip(batch, answer["rewards"], want)) if got != w]
    ids = [j for j in answer["job_ids"] if j is not None]
    distinct = len({distinct_key(s) for s in batch})
    return {"samples": len(batch), "distinct": distinct, "posts": posts[0], "wall_s": round(wall, 1),
            "reward_mismatches": len(mismatches), "mismatch_examples": mismatches[:10],
            "rewards_compared": sum(w is not None for w in want),
            "jobs": len(before_resend), "distinct_job_ids": len(set(ids)),
            "unanswered": sum(r[1] != "done" for r in before_resend),
            "resend_same_rewards": resent["rewards"] == answer["rewards"],
            "resend_new_jobs": len(after_resend) - len(before_resend), "events": events,
            "ok": (not mismatches and len(set(ids)) == distinct == len(before_resend)
                   and all(r[1] == "done" for r in before_resend) and resent["rewards"] == answer["rewards"]
                   and len(after_resend) == len(before_resend) and any(e["event"] == "server_restarted"
                                                                       for e in events))}


def _metric_sum(snapshots: list[dict], prefix: str) -> dict[str, float]:
    out: Counter = Counter()
    for snap in snapshots:
        for name, value in snap.items():
            if name.startswith(prefix):
                out[name[len(prefix):] or "total"] += value
    return dict(out)


def check(subs, quiet, run) -> dict:
    from drkernel.serve.cache import transient_reason
    from drkernel.serve.codec import decode_result

    answers = run["answers"]
    not_once = [i for i, a in answers.items() if len(a) != 1]
    env_failures = [i for i, a in answers.items() if len(a) == 1 and isinstance(a[0], Exception)]
    mismatches = []
    nonfinite_bad = []
    by_kind: dict[str, Counter] = {}
    for i, a in answers.items():
        sub = subs[i]
        kind = sub["kind"] if sub["repeat_of"] is None else f"repeat:{sub['kind']}"
        by_kind.setdefault(kind, Counter())["submitted"] += 1
        if len(a) != 1 or isinstance(a[0], Exception):
            continue
        got, want = verdict(a[0]), quiet[distinct_key(sub)]
        by_kind[kind]["passed" if got[0] else "failed"] += 1
        if got != want:
            mismatches.append({"i": i, "kind": kind, "soak": got, "quiet": want,
                               "message": a[0].error.message[:300] if a[0].error else None})
        if sub["kind"] in ("nan", "inf") and a[0].details.get("first_failure", {}).get("max_abs_err") != float("inf"):
            nonfinite_bad.append(i)
    ids = [r[0] for r in run["rows"]]
    cached_transient = [r[0] for r in run["rows"]
                        if r[2] and r[3] and transient_reason(decode_result(json.loads(r[3]))) is not None]
    transient_answers = sum(1 for r in run["rows"] if r[3] and transient_reason(json.loads(r[3])) is not None)
    return {
        "answered_exactly_once": len(subs) - len(not_once), "not_exactly_once": len(not_once),
        "environment_failures": len(env_failures), "verdict_mismatches": len(mismatches),
        "mismatch_examples": mismatches[:10], "nonfinite_not_decoded": len(nonfinite_bad),
        "store": {"jobs": len(ids), "distinct_ids": len(set(ids)),
                  "unanswered": sum(1 for r in run["rows"] if r[1] != "done"),
                  "cached": sum(1 for r in run["rows"] if r[2]), "cached_transient": len(cached_transient),
                  "transient_answers": transient_answers},
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
    }


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def machine(device: str) -> dict:
    info = {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}
    if device == "cuda":
        import torch

        info["gpu"] = torch.cuda.get_device_name()
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=1000, help="submissions")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--workers", type=int, default=None, help="server capacity (default: 2 on CPU, 4 on CUDA)")
    p.add_argument("--clients", type=int, default=4, help="client threads, each with its own RemoteGrader")
    p.add_argument("--per-client", type=int, default=4, help="submissions in flight per client")
    p.add_argument("--kill-every", type=int, default=None,
                   help="answers between kills of every worker (0: never; default: 100, or count/4 when smaller, so "
                        "a short run still kills workers several times)")
    p.add_argument("--restart-at", type=float, default=0.5, help="share of answers after which the server is "
                                                                 "SIGKILLed and restarted (0: never)")
    p.add_argument("--skip-quiet", action="store_true", help="no quiet run (verdicts are then not compared)")
    p.add_argument("--openrlhf", type=int, default=64, help="samples of the OpenRLHF route leg (0: no leg; needs "
                                                           "the quiet run)")
    p.add_argument("--out", default="bench_service_soak.json")
    args = p.parse_args(argv)
    args.workers = args.workers or (2 if args.device == "cpu" else 4)
    if args.clients < 4:
        print("note: fewer than 4 clients", file=sys.stderr)

    subs = submissions(args.count, args.device)
    info = machine(args.device)
    quiet_rewards: dict = {}
    quiet, quiet_wall, n_distinct = ({}, 0.0, 0) if args.skip_quiet else quiet_run(subs, args.device, args.workers,
                                                                                   quiet_rewards)
    print(f"quiet run: {n_distinct} distinct submissions in {quiet_wall:.0f} s "
          f"({60 * n_distinct / max(quiet_wall, 1e-9):.1f} evaluations/min)", flush=True)
    run = soak(subs, args)
    if args.skip_quiet:
        quiet = {distinct_key(s): verdict(a[0]) for s, a in zip(subs, run["answers"].values())
                 if len(a) == 1 and not isinstance(a[0], Exception)}
    verdicts = check(subs, quiet, run)
    lat = run["latencies"]
    kills = [e for e in run["events"] if e["event"] == "workers_killed"]
    report = {
        "device": args.device, "machine": info, "submissions": len(subs), "distinct_submissions": n_distinct,
        **verdicts,
        "faults": {"worker_kill_events": len(kills), "workers_killed": sum(e["workers"] for e in kills),
                   "server_restarts": sum(e["event"] == "server_restarted" for e in run["events"]),
                   "events": run["events"]},
        "server_metrics": {"transient_retries": _metric_sum(run["metrics"], "drkernel_transient_retries_total"),
                           "transient_answers": _metric_sum(run["metrics"], "drkernel_transient_answers_total"),
                           "jobs_recovered": _metric_sum(run["metrics"], "drkernel_jobs_recovered_total"),
                           "cache_hits": _metric_sum(run["metrics"], "drkernel_cache_hits_total"),
                           "grader_restarts": _metric_sum(run["metrics"], "drkernel_worker_restarts_total")},
        "client_stats": {k: sum(s.get(k, 0) for s in run["client_stats"]) for k in
                         ("submitted", "retries", "resubmitted", "failovers", "cached", "transient")},
        "soak_wall_s": round(run["wall_s"], 1),
        "soak_evaluations_per_min": round(60 * len(subs) / run["wall_s"], 1),
        "quiet_wall_s": round(quiet_wall, 1),
        "quiet_evaluations_per_min": round(60 * n_distinct / quiet_wall, 1) if quiet_wall else None,
        "latency_s": {"p50": round(pct(lat, 0.5), 2), "p99": round(pct(lat, 0.99), 2), "max": round(max(lat), 2)},
        "loadavg_end": os.getloadavg(), "args": vars(args), "state_dir": run["state_dir"],
    }
    ok = (report["answered_exactly_once"] == len(subs) and report["environment_failures"] == 0
          and report["verdict_mismatches"] == 0 and report["nonfinite_not_decoded"] == 0
          and report["store"]["distinct_ids"] == len(subs) == report["store"]["jobs"]
          and report["store"]["unanswered"] == 0 and report["store"]["cached_transient"] == 0)
    if args.openrlhf and not args.skip_quiet:
        report["openrlhf"] = openrlhf_leg(subs, quiet_rewards, args)
        ok = ok and report["openrlhf"]["ok"]
        print("openrlhf route:", json.dumps({k: v for k, v in report["openrlhf"].items() if k != "events"}),
              flush=True)
    report["ok"] = ok
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(f"{'subs':>5} {'once':>5} {'envfail':>7} {'mismatch':>8} {'cached':>6} {'transient':>9} "
          f"{'kills':>5} {'restarts':>8} {'evals/min':>9} {'quiet/min':>9} {'p50 s':>6} {'p99 s':>6}")
    print(f"{len(subs):5d} {report['answered_exactly_once']:5d} {report['environment_failures']:7d} "
          f"{report['verdict_mismatches']:8d} {report['store']['cached']:6d} {report['store']['transient_answers']:9d} "
          f"{report['faults']['workers_killed']:5d} {report['faults']['server_restarts']:8d} "
          f"{report['soak_evaluations_per_min']:9.1f} {report['quiet_evaluations_per_min'] or 0:9.1f} "
          f"{report['latency_s']['p50']:6.2f} {report['latency_s']['p99']:6.2f}")
    print("by kind:", json.dumps(report["by_kind"]))
    print("server:", json.dumps(report["server_metrics"]), "client:", json.dumps(report["client_stats"]))
    for m in report["mismatch_examples"]:
        print("MISMATCH", m)
    print("wrote", args.out, "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
