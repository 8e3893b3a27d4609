"""Soak of the distributed graders: N submissions with workers SIGKILLed along the way, every one
answered exactly once; throughput and p50/p99 latency.

    python tests/benchmarks/bench_service.py --backend http --submissions 1000 --kill-every 250
    python tests/benchmarks/bench_service.py --backend ray  --submissions 1000 --kill-every 250
    python tests/benchmarks/bench_service.py --backend http --grader local --submissions 40  # real grading

``--grader echo`` (default) answers from the submission itself in ``--delay`` seconds
(tests/service/echo_grader.py): the soak then measures the delivery layer (job store, queue,
retries, failover) at scale on a small machine. ``--grader local`` grades real kernels with
LocalGrader on the CPU interpreter (honest and wrong probe kernels, distinct seeds), and also
times the same kernels through LocalGrader in-process for the service's overhead.

HTTP: ``--servers`` real ``drkernel serve`` processes behind one RemoteGrader; every
``--kill-every`` answers one server is SIGKILLed and restarted on its store 1 s later. Ray: a
RayGrader of ``--actors`` actors; every ``--kill-every`` answers one actor process is SIGKILLed
(Ray restarts it). Checks: one answer per submission, each the answer to its own submission; over
HTTP also: the servers' stores together hold exactly the submitted job ids, all answered.
Prints a table and writes ``--out`` JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from drkernel.env.conformance import HONEST, PROBE_TASK  # noqa: E402
from drkernel.env.result import EnvironmentFailure  # noqa: E402
from drkernel.env.tasks.task import Task  # noqa: E402
from tests.service.echo_grader import digest  # noqa: E402

FAST_OPTIONS = {"measure_performance": False, "profile": False, "trials_per_distribution": 1,
                "distributions": ["native"], "determinism_check": False}
WRONG = HONEST.replace("* 2.0, mask=m)", "* 2.001, mask=m)")


def submissions(n: int, grader: str) -> list[tuple[Task, str, int, bool]]:
    """``(task, source, seed, should_pass)`` for each submission."""
    if grader == "echo":
        task = Task.from_source("class Model: pass", name="echo")
        return [(task, f"HONEST {i}" if i % 4 else f"wrong {i}", i, bool(i % 4)) for i in range(n)]
    task = Task.from_source(PROBE_TASK, name="probe")
    return [(task, HONEST if i % 4 else WRONG, i, bool(i % 4)) for i in range(n)]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


async def drive(grader, subs, concurrency: int, on_answer, options) -> tuple[dict, float]:
    answers: dict[int, list] = {i: [] for i in range(len(subs))}
    latencies: list[float] = []
    limit = asyncio.Semaphore(concurrency)

    async def one(i):
        task, source, seed, _ = subs[i]
        async with limit:
            t0 = time.monotonic()
            try:
                answers[i].append(await grader.agrade(task, source, seed=seed, options=options))
            except EnvironmentFailure as exc:
                answers[i].append(exc)
            latencies.append(time.monotonic() - t0)
            on_answer()

    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(len(subs))))
    return answers, time.monotonic() - t0, latencies


def check(answers, subs, grader: str) -> dict:
    multiple = [i for i, a in answers.items() if len(a) != 1]
    failures = [i for i, a in answers.items() if a and isinstance(a[0], EnvironmentFailure)]
    wrong = []
    for i, a in answers.items():
        if len(a) != 1 or i in failures:
            continue
        task, source, seed, should_pass = subs[i]
        r = a[0]
        if r.passed != should_pass or (grader == "echo" and r.details.get("digest") != digest(task.source, source, seed)):
            wrong.append(i)
    return {"answered": sum(len(a) == 1 for a in answers.values()), "not_exactly_once": len(multiple),
            "wrong_answer": len(wrong), "environment_failures": len(failures)}


def run_http(args, subs) -> dict:
    from tests.service.conftest import Server
    from drkernel.serve.remote import RemoteGrader

    tmp = Path(tempfile.mkdtemp(prefix="bench-service-"))
    extra = ["--no-cache", "--workers", str(args.workers), "--queue-size", str(args.queue_size)]
    if args.grader == "echo":
        extra += ["--grader", "tests.service.echo_grader:make", "--no-warmup"]
    else:
        extra += ["--cpu-fast"]
    servers = [Server(tmp / f"s{k}", *extra, env={"ECHO_DELAY_S": str(args.delay)}).start(timeout=300)
               for k in range(args.servers)]
    grader = RemoteGrader([s.url for s in servers], backoff_s=0.05, max_backoff_s=2.0, poll_s=10.0,
                          health_interval_s=0.5, timeout_s=1800)
    kills = []
    done = [0]
    lock = threading.Lock()
    kill_now = threading.Event()

    def on_answer():
        with lock:
            done[0] += 1
            if args.kill_every and done[0] % args.kill_every == 0 and done[0] < len(subs):
                kill_now.set()

    stop = threading.Event()

    def killer():
        while not stop.is_set():
            if kill_now.wait(0.2):
                kill_now.clear()
                victim = random.Random(len(kills)).choice(servers)
                victim.kill()
                kills.append({"server": victim.url, "after_answers": done[0]})
                time.sleep(1.0)
                victim.start(timeout=300)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        answers, wall, latencies = asyncio.run(drive(grader, subs, args.concurrency, on_answer,
                                                     None if args.grader == "echo" else FAST_OPTIONS))
    finally:
        stop.set()
        t.join()
        stats = dict(grader.stats)
        grader.close()
        for s in servers:
            try:
                s.drain(timeout=600)  # restarted servers answer the jobs they had accepted
            except RuntimeError as exc:
                print("warning:", exc)
            s.stop()
    ids: dict[str, list[str]] = {}
    for s in servers:
        db = sqlite3.connect(s.state_dir / "jobs.sqlite")
        for job_id, state in db.execute("SELECT id, state FROM jobs"):
            ids.setdefault(job_id, []).append(state)
        db.close()
    store = {"distinct_job_ids": len(ids), "unanswered_rows": sum(st != "done" for v in ids.values() for st in v),
             "ids_on_two_servers": sum(len(v) > 1 for v in ids.values())}
    return {"wall_s": wall, "latencies": latencies, "answers": answers, "kills": kills, "client": stats,
            "store": store}


def run_ray(args, subs) -> dict:
    import ray

    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.serve.ray_pool import RayGrader
    from tests.service.echo_grader import make

    ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "ECHO_DELAY_S": str(args.delay)}})
    factory = make if args.grader == "echo" else None
    grader = RayGrader(cpu_fast(EvalConfig(device="cpu")), num_actors=args.actors, capacity_per_actor=args.workers,
                       num_cpus=0.1, grader_factory=factory)
    kills: list = []
    killers: list[threading.Thread] = []
    done = [0]
    lock = threading.Lock()

    def on_answer():
        with lock:
            done[0] += 1
            if args.kill_every and done[0] % args.kill_every == 0 and done[0] < len(subs):
                killers.append(threading.Thread(target=_kill_actor, args=(grader, len(killers), kills, done[0])))
                killers[-1].start()

    try:
        answers, wall, latencies = asyncio.run(drive(grader, subs, args.concurrency, on_answer,
                                                     None if args.grader == "echo" else FAST_OPTIONS))
        for t in killers:
            t.join()
        stats = dict(grader.stats)
    finally:
        grader.close()
        ray.shutdown()
    return {"wall_s": wall, "latencies": latencies, "answers": answers, "kills": kills, "client": stats}


def _kill_actor(grader, k: int, kills: list, after: int) -> None:
    """SIGKILL one live actor now (actors still restarting from an earlier kill are skipped)."""
    import ray

    pids = []
    for actor in grader.actors:
        try:
            pids.append(ray.get(actor.info.remote(), timeout=2)["pid"])
        except Exception:  # noqa: BLE001 - restarting
            pass
    if pids:
        pid = random.Random(k).choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
            kills.append({"actor_pid": pid, "after_answers": after})
        except ProcessLookupError:
            pass


def local_baseline(args, subs) -> dict:
    """The same kernels through LocalGrader in-process (service overhead = 1 - served/local)."""
    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader

    grader = LocalGrader(cpu_fast(EvalConfig(device="cpu")), capacity=args.workers * args.servers)
    try:
        _, wall, latencies = asyncio.run(drive(grader, subs, args.concurrency, lambda: None, FAST_OPTIONS))
    finally:
        grader.close()
    return {"wall_s": wall, "evals_per_s": len(subs) / wall, "p50_s": pct(latencies, 0.5),
            "p99_s": pct(latencies, 0.99)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=("http", "ray"), default="http")
    p.add_argument("--grader", choices=("echo", "local"), default="echo")
    p.add_argument("--submissions", type=int, default=1000)
    p.add_argument("--servers", type=int, default=2, help="HTTP servers")
    p.add_argument("--actors", type=int, default=3, help="Ray actors")
    p.add_argument("--workers", type=int, default=2, help="capacity of each server / actor")
    p.add_argument("--queue-size", type=int, default=64, help="each server's queue (429 beyond)")
    p.add_argument("--concurrency", type=int, default=32, help="submissions in flight at once")
    p.add_argument("--kill-every", type=int, default=250, help="answers between kills (0: never)")
    p.add_argument("--delay", type=float, default=0.02, help="echo grader's seconds per evaluation")
    p.add_argument("--compare-local", action="store_true", help="also time LocalGrader in-process (--grader local)")
    p.add_argument("--out", default="bench_service.json")
    args = p.parse_args(argv)

    subs = submissions(args.submissions, args.grader)
    run = run_http(args, subs) if args.backend == "http" else run_ray(args, subs)
    verdict = check(run["answers"], subs, args.grader)
    lat = run["latencies"]
    report = {"backend": args.backend, "grader": args.grader, "submissions": len(subs), **verdict,
              "kills": run["kills"], "wall_s": round(run["wall_s"], 2),
              "evals_per_s": round(len(subs) / run["wall_s"], 2), "p50_s": round(pct(lat, 0.5), 4),
              "p99_s": round(pct(lat, 0.99), 4), "mean_s": round(statistics.mean(lat), 4),
              "client": run["client"], "store": run.get("store"), "args": vars(args)}
    if args.compare_local and args.grader == "local":
        report["local_in_process"] = local_baseline(args, subs)
        report["service_cost"] = 1 - report["evals_per_s"] / report["local_in_process"]["evals_per_s"]
    ok = (verdict["answered"] == len(subs) and verdict["not_exactly_once"] == 0 and verdict["wrong_answer"] == 0
          and (report["store"] is None or (report["store"]["distinct_job_ids"] == len(subs)
                                           and report["store"]["unanswered_rows"] == 0)))
    report["ok"] = ok
    print(f"{'backend':10} {'grader':7} {'subs':>5} {'answered':>8} {'dup/lost':>8} {'wrong':>5} {'envfail':>7} "
          f"{'kills':>5} {'evals/s':>8} {'p50 s':>7} {'p99 s':>7}")
    print(f"{args.backend:10} {args.grader:7} {len(subs):5d} {verdict['answered']:8d} {verdict['not_exactly_once']:8d} "
          f"{verdict['wrong_answer']:5d} {verdict['environment_failures']:7d} {len(run['kills']):5d} "
          f"{report['evals_per_s']:8.2f} {report['p50_s']:7.3f} {report['p99_s']:7.3f}")
    if "local_in_process" in report:
        loc = report["local_in_process"]
        print(f"{'in-process':10} {'local':7} {len(subs):5d} {'':8} {'':8} {'':5} {'':7} {'':5} "
              f"{loc['evals_per_s']:8.2f} {loc['p50_s']:7.3f} {loc['p99_s']:7.3f}   service cost "
              f"{100 * report['service_cost']:.1f}%")
    print("client:", run["client"], "store:", run.get("store"))
    Path(args.out).write_text(json.dumps(report, indent=2))
    print("wrote", args.out, "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
