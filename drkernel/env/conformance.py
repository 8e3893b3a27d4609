"""``check_grader(make_grader)``: the conformance suite every :class:`~drkernel.env.grader.Grader` passes.

Any implementation of the protocol (``LocalGrader``, a remote HTTP grader, a Ray pool) is driven
through its *public* path only — ``grade``, ``agrade``, ``capacity``, ``close`` — with honest,
wrong and hostile candidates on a tiny probe task (257 floats, CPU interpreter or GPU alike)::

    from drkernel.env.conformance import assert_grader_conforms
    assert_grader_conforms(lambda: LocalGrader(EvalConfig(device="cpu")))

``make_grader()`` returns a fresh, open grader; the suite closes what it makes. Checks (by name):

``honest_passes``            an honest kernel passes (compiled, correct, not hacked)
``wrong_fails``              an off-by-a-little kernel fails with ``error.stage == "correctness"``
``timeout_kills_children``   a hanging candidate that tries to start a grandchild: failed at its
                             deadline, no survivor (a sandbox may refuse the grandchild)
``output_is_capped``         a stdout flood: failed as a flood, bounded tail and message
``crash_does_not_poison``    ``os._exit`` in forward: failed; the next honest candidate passes
``memory_is_capped``         a memory hog: failed with "memory limit exceeded"
``seed_determines_inputs``   same seed -> same inputs (seen from inside the candidate), other seed -> other
``concurrent_matches_sequential``  ``max(4, capacity)`` evaluations at once (threads) give the verdicts
                             and inputs of sequential ones
``agrade_matches_grade``     ``await agrade(...)`` gives grade's verdict
``cancel_kills_candidate``   cancelling an ``agrade`` task ends the candidate's process (the check reads
                             a pid file the candidate writes in its own work directory under this
                             machine's work-directory root: skip it for graders on other machines)
``close_semantics``          ``close()`` is idempotent; ``grade`` after close raises RuntimeError

Options sent are JSON-serialisable :class:`~drkernel.env.config.EvalConfig` overrides, as a remote
grader must accept them.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

PROBE_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0

def get_inputs():
    return [torch.randn(257)]

def get_init_inputs():
    return []
'''

_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _double(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

def _launch(x):
    out = torch.empty_like(x)
    _double[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
'''

HONEST = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)
'''

WRONG = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x) * 1.01
'''

HANG_WITH_CHILD = _KERNEL + '''
import subprocess, sys, time
class ModelNew(nn.Module):
    def forward(self, x):
        try:  # a sandbox that refuses processes is fine: the hang is what is checked
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            print(f"GRANDCHILD_PID={p.pid}", flush=True)
        except Exception as exc:
            print(f"GRANDCHILD_REFUSED={type(exc).__name__}", flush=True)
        time.sleep(600)
        return _launch(x)
'''

FLOOD = _KERNEL + '''
import sys
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        chunk = "x" * 65536 + "\\n"
        for _ in range(4096):
            sys.stdout.write(chunk)
    def forward(self, x):
        return _launch(x)
'''

CRASH = _KERNEL + '''
import os
class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(7)
'''

MEMORY_HOG = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        hog = [torch.ones(64 << 20) for _ in range(64)]  # 16 GiB, touched page by page
        return _launch(x)
'''

PRINT_INPUTS = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        print(f"INPUT_SUM={float(x.double().sum()):.12e}", flush=True)
        return _launch(x)
'''

SLEEP_PRINT_PID = _KERNEL + '''
import os, time
class ModelNew(nn.Module):
    def forward(self, x):
        print(f"CANDIDATE_PID={os.getpid()}", flush=True)
        with open("PIDFILE", "a") as fh:  # in its own work directory, the only place it may write
            fh.write(f"{os.getpid()}\\n")
        time.sleep(600)
        return _launch(x)
'''

#: The probe protocol: one native trial, no timing (fast on the CPU interpreter).
FAST_OPTIONS: dict[str, Any] = {"measure_performance": False, "profile": False, "trials_per_distribution": 1,
                                "distributions": ["native"], "determinism_check": False}


@dataclass
class CheckResult:
    name: str
    ok: bool
    message: str = ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _opts(**kw: Any) -> dict[str, Any]:
    return {**FAST_OPTIONS, **kw}


def _sums(result: Any) -> list[str]:
    return re.findall(r"INPUT_SUM=(\S+)", (result.details or {}).get("output_tail", "") or "")


def _verdict(r: Any) -> tuple:
    return (r.compiled, r.correct, r.hacked, r.error.stage if r.error else None)


def check_grader(make_grader: Callable[[], Any], *, skip: tuple[str, ...] = ()) -> list[CheckResult]:
    """Run every check (minus ``skip``) against graders from ``make_grader``; see the module docstring."""
    from drkernel.env.tasks.task import Task

    task = Task.from_source(PROBE_TASK, name="probe")
    results: list[CheckResult] = []

    def run(name: str, fn: Callable[[Any], tuple[bool, str]], grader: Any) -> None:
        if name in skip:
            return
        try:
            ok, msg = fn(grader)
        except Exception as exc:  # noqa: BLE001 - a raising check is a failed check, with its reason
            ok, msg = False, f"raised {type(exc).__name__}: {exc}"
        results.append(CheckResult(name, ok, msg))

    def honest(g):
        r = g.grade(task, HONEST, seed=1, options=_opts())
        return r.passed, f"passed={r.passed} error={r.error}"

    def wrong(g):
        r = g.grade(task, WRONG, seed=1, options=_opts())
        return (r.compiled and not r.correct and r.error is not None and r.error.stage == "correctness",
                f"verdict={_verdict(r)}")

    def timeout(g):
        t0 = time.monotonic()
        r = g.grade(task, HANG_WITH_CHILD, seed=1, options=_opts(call_timeout_s=8.0))
        elapsed = time.monotonic() - t0
        pids = [int(p) for p in re.findall(r"GRANDCHILD_PID=(\d+)", r.details.get("output_tail", "") or "")]
        time.sleep(0.2)
        survivors = [p for p in pids if _alive(p)]
        for p in survivors:  # never leave a process behind, even when the check fails
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        refused = "GRANDCHILD_REFUSED" in (r.details.get("output_tail", "") or "")
        ok = (not r.correct and r.error is not None and "timed out" in r.error.message and (bool(pids) or refused)
              and not survivors and elapsed < 60)
        return ok, (f"error={r.error and r.error.message[:80]!r} grandchildren={pids} survivors={survivors} "
                    f"elapsed={elapsed:.1f}s")

    def flood(g):
        r = g.grade(task, FLOOD, seed=1, options=_opts(output_limit_bytes=1 << 20))
        tail = r.details.get("output_tail", "") or ""
        ok = (not r.compiled and r.error is not None and "flood" in r.error.message and len(tail) <= 4096
              and len(r.error.message) <= 4000)
        return ok, f"error={r.error and r.error.message[:80]!r} tail={len(tail)} chars"

    def crash(g):
        r1 = g.grade(task, CRASH, seed=1, options=_opts())
        r2 = g.grade(task, HONEST, seed=1, options=_opts())
        ok = r1.compiled and not r1.correct and r1.error is not None and "exit" in r1.error.message and r2.passed
        return ok, f"crash error={r1.error and r1.error.message[:80]!r}; next passed={r2.passed} ({r2.error})"

    def memory(g):
        r = g.grade(task, MEMORY_HOG, seed=1, options=_opts(memory_limit_mb=1500))
        ok = r.compiled and not r.correct and r.error is not None and "memory limit exceeded" in r.error.message
        return ok, f"verdict={_verdict(r)} error={r.error and r.error.message[:80]!r}"

    def seeds(g):
        a, b, c = (_sums(g.grade(task, PRINT_INPUTS, seed=s, options=_opts())) for s in (11, 11, 12))
        return bool(a) and a == b and a != c, f"seed 11: {a} / {b}; seed 12: {c}"

    def concurrent(g):
        n = max(4, int(g.capacity))
        kinds = (HONEST, WRONG, PRINT_INPUTS)
        seq = [g.grade(task, src, seed=100, options=_opts()) for src in kinds]
        with ThreadPoolExecutor(max_workers=n) as pool:
            par = list(pool.map(lambda i: g.grade(task, kinds[i % 3], seed=100, options=_opts()), range(n)))
        bad = [i for i, r in enumerate(par) if (_verdict(r), _sums(r)) != (_verdict(seq[i % 3]), _sums(seq[i % 3]))]
        ok = not bad and bool(_sums(seq[2]))
        return ok, f"{n} concurrent; jobs differing from sequential: {bad}; verdicts {[_verdict(r) for r in par]}"

    def agrade(g):
        r_sync = g.grade(task, HONEST, seed=3, options=_opts())
        r_async = asyncio.run(g.agrade(task, HONEST, seed=3, options=_opts()))
        same = _verdict(r_sync) == _verdict(r_async) and r_async.passed
        return same, f"agrade verdict {_verdict(r_async)} vs grade {_verdict(r_sync)}"

    def cancel(g):
        import glob
        import tempfile

        from drkernel.env.process.sandbox import workdir_root_default

        name = f"drkernel-conformance-{os.getpid()}-{time.monotonic_ns()}.pid"
        src = SLEEP_PRINT_PID.replace('"PIDFILE"', repr(name))
        root = workdir_root_default() or tempfile.gettempdir()

        def pidfiles() -> list[str]:
            return glob.glob(os.path.join(root, "drkernel-*", name))

        async def cancel_one() -> tuple[float, list[int]]:
            fut = asyncio.ensure_future(g.agrade(task, src, seed=3, options=_opts(call_timeout_s=120.0)))
            t_end = time.monotonic() + 60
            while time.monotonic() < t_end and not pidfiles():
                await asyncio.sleep(0.1)
            found = []
            for f in pidfiles():
                try:
                    found += [int(x) for x in open(f).read().split()]
                except OSError:
                    pass
            fut.cancel()
            t0 = time.monotonic()
            try:
                await fut
            except asyncio.CancelledError:
                pass
            return time.monotonic() - t0, found

        took, pids = asyncio.run(cancel_one())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        survivors = [p for p in pids if _alive(p)]
        for p in survivors:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        ok = bool(pids) and not survivors and took < 30
        return ok, f"cancelled candidate pids {pids}, survivors {survivors}, cancel took {took:.1f}s"

    grader = make_grader()
    try:
        for name, fn in (("honest_passes", honest), ("wrong_fails", wrong), ("timeout_kills_children", timeout),
                         ("output_is_capped", flood), ("crash_does_not_poison", crash),
                         ("memory_is_capped", memory), ("seed_determines_inputs", seeds),
                         ("concurrent_matches_sequential", concurrent), ("agrade_matches_grade", agrade),
                         ("cancel_kills_candidate", cancel)):
            run(name, fn, grader)
    finally:
        grader.close()

    def close_semantics(g):
        g.close()
        g.close()  # idempotent
        try:
            g.grade(task, HONEST, seed=1, options=_opts())
        except RuntimeError as exc:
            return True, f"grade after close raised: {exc}"
        return False, "grade after close did not raise RuntimeError"

    run("close_semantics", close_semantics, make_grader())
    return results


def assert_grader_conforms(make_grader: Callable[[], Any], *, skip: tuple[str, ...] = ()) -> None:
    """Raise AssertionError naming every failed check."""
    failed = [r for r in check_grader(make_grader, skip=skip) if not r.ok]
    if failed:
        raise AssertionError("grader failed conformance: " + "; ".join(f"{r.name}: {r.message}" for r in failed))


CHECKS = ("honest_passes", "wrong_fails", "timeout_kills_children", "output_is_capped", "crash_does_not_poison",
          "memory_is_capped", "seed_determines_inputs", "concurrent_matches_sequential", "agrade_matches_grade",
          "cancel_kills_candidate", "close_semantics")

__all__ = ["check_grader", "assert_grader_conforms", "CheckResult", "CHECKS", "PROBE_TASK", "FAST_OPTIONS"]
