"""``check_executor(executor)``: the conformance suite every executor backend must pass.

In the manner of Gymnasium's ``check_env`` and inspect_ai's sandbox ``self_check``: four named
checks, each with a hostile or probing candidate, run on CPU through the Triton interpreter.

1. ``timeout_kills_children`` — a candidate that starts a grandchild process and then hangs: the
   evaluation fails at its deadline and neither process survives it.
2. ``output_is_capped`` — a candidate that floods stdout: the evaluation fails as a flood and the
   kept output is a bounded tail.
3. ``crash_does_not_poison`` — a candidate that kills its own process mid-forward: a failed
   result, and the next, honest evaluation passes.
4. ``seed_determines_inputs`` — the same seed draws the same inputs (and a different seed other
   inputs), observed from inside the candidate.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from drkernel.env.config import EvalConfig

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

HANG_WITH_CHILD = _KERNEL + '''
import subprocess, sys, time
class ModelNew(nn.Module):
    def forward(self, x):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"GRANDCHILD_PID={p.pid}", flush=True)
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

PRINT_INPUTS = _KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        print(f"INPUT_SUM={float(x.double().sum()):.12e}", flush=True)
        return _launch(x)
'''


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


def _config(base: EvalConfig | None, **kw) -> EvalConfig:
    cfg = (base or EvalConfig()).with_overrides(device="cpu", measure_performance=False, profile=False,
                                                trials_per_distribution=1, distributions=("native",),
                                                determinism_check=False)
    return cfg.with_overrides(**kw)


def check_executor(executor, base_config: EvalConfig | None = None) -> list[CheckResult]:
    """Run the four checks against ``executor`` (anything with ``evaluate(task, candidate, *, seed, config)``)."""
    results = []

    # 1. timeouts kill the candidate's process group, grandchildren included
    t0 = time.monotonic()
    r = executor.evaluate(PROBE_TASK, HANG_WITH_CHILD, seed=1, config=_config(base_config, call_timeout_s=8.0))
    elapsed = time.monotonic() - t0
    pids = [int(p) for p in re.findall(r"GRANDCHILD_PID=(\d+)", r.details.get("output_tail", "") or "")]
    time.sleep(0.2)
    survivors = [p for p in pids if _alive(p)]
    ok = (not r.correct and r.error is not None and "timed out" in r.error.message and bool(pids)
          and not survivors and elapsed < 60)
    results.append(CheckResult("timeout_kills_children", ok,
                               f"error={r.error and r.error.message[:80]!r} grandchildren={pids} "
                               f"survivors={survivors} elapsed={elapsed:.1f}s"))
    for p in survivors:  # never leave a process behind, even when the check fails
        try:
            os.kill(p, 9)
        except OSError:
            pass

    # 2. output floods are cut and only a bounded tail is kept
    r = executor.evaluate(PROBE_TASK, FLOOD, seed=1, config=_config(base_config, output_limit_bytes=1 << 20))
    tail = r.details.get("output_tail", "") or ""
    ok = (not r.compiled and r.error is not None and "flood" in r.error.message and len(tail) <= 4096
          and len(r.error.message) <= 4000)
    results.append(CheckResult("output_is_capped", ok, f"error={r.error and r.error.message[:80]!r} "
                                                       f"tail={len(tail)} chars"))

    # 3. a crash is a failed result and does not poison the next evaluation
    r1 = executor.evaluate(PROBE_TASK, CRASH, seed=1, config=_config(base_config))
    r2 = executor.evaluate(PROBE_TASK, HONEST, seed=1, config=_config(base_config))
    ok = (r1.compiled and not r1.correct and r1.error is not None and "exit" in r1.error.message
          and r2.passed)
    results.append(CheckResult("crash_does_not_poison", ok, f"crash error={r1.error and r1.error.message[:80]!r}; "
                                                            f"next passed={r2.passed} ({r2.error})"))

    # 4. the seed determines the inputs
    def sums(seed: int) -> list[str]:
        res = executor.evaluate(PROBE_TASK, PRINT_INPUTS, seed=seed, config=_config(base_config))
        return re.findall(r"INPUT_SUM=(\S+)", res.details.get("output_tail", "") or "")

    a, b, c = sums(11), sums(11), sums(12)
    ok = bool(a) and a == b and a != c
    results.append(CheckResult("seed_determines_inputs", ok, f"seed 11: {a} / {b}; seed 12: {c}"))
    return results


def assert_executor_conforms(executor, base_config: EvalConfig | None = None) -> None:
    failed = [r for r in check_executor(executor, base_config) if not r.ok]
    if failed:
        raise AssertionError("executor failed conformance: " + "; ".join(f"{r.name}: {r.message}" for r in failed))
