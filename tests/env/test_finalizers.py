"""The candidate's finalisers run only inside a call's window (drkernel.env.process.harness.Harness._release).

A finaliser (``__del__``, a weakref callback, an object hung on an input or output tensor) runs when
its object is freed. If that happened after the call's window closed (at the harness's next
automatic collection, or as it dropped the call's output), work queued there would be free: the
forward returns an empty output, the finaliser fills it before it is read, and the call times as
nothing. Each case below sleeps 50 ms in a finaliser; the sleep must land in the timed call.

Run in a subprocess: the harness installs process-wide hooks (Triton's launch entry points) and the
worker turns automatic collection off.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNNER = textwrap.dedent('''
    import gc, json, socket, sys, time, weakref
    import torch
    from drkernel.env.protocol import TimeRequest
    from drkernel.env.measure.timing import run_calls
    from drkernel.env.process.harness import Harness

    a, b = socket.socketpair()
    h = Harness(sys.argv[1], "cpu", a.fileno())
    h._gc_disable()  # as the load does
    from drkernel.env.measure.capture import make_capture
    h._arm, h._commit, h._captured = make_capture(torch, "cpu")
    h.pool_inputs = lambda seed, distribution="native": [torch.full((4,), float(seed))]
    SLEEP = 0.05

    class Sleeper:
        def __del__(self):
            time.sleep(SLEEP)

    class Cyclic(torch.nn.Module):  # garbage only a collection frees
        def forward(self, x):
            s = Sleeper()
            s.me = s
            return x + 1

    # (a weakref finaliser, not an attribute: a tensor the harness reads must have none of its own)
    class TaggedOutput(torch.nn.Module):  # runs when the harness lets go of the output
        def forward(self, x):
            y = x + 1
            weakref.finalize(y, time.sleep, SLEEP)
            return y

    class TaggedInput(torch.nn.Module):  # runs when the harness stops keeping the inputs alive
        def forward(self, x):
            weakref.finalize(x, time.sleep, SLEEP)
            return x + 1

    def fresh():  # nothing left over from the previous model's calls
        h._trash.clear()
        h._kept.clear()
        h._kept_bytes = 0
        h._arm, h._commit, h._captured = make_capture(torch, "cpu")  # (it holds the last output)
        gc.collect()

    res = {"gc_enabled": gc.isenabled()}
    req = TimeRequest(seeds=[1, 2, 3], factors=[1.0, 1.0, 1.0], warmup=0, spot=False)
    for name, model in (("cyclic", Cyclic()), ("output", TaggedOutput())):
        h.model = model
        fresh()
        res[name] = run_calls(h, req).host_ms
    import drkernel.env.process.harness as w
    w.KEEP_BYTES["cpu"] = 0  # every call lets go of the inputs of the call before the last
    h.model = TaggedInput()
    fresh()
    res["input"] = run_calls(h, TimeRequest(seeds=[1, 2, 3, 4], factors=[1.0] * 4, warmup=0, spot=False)).host_ms
    print(json.dumps(res))
''')


def test_finalisers_run_inside_the_timed_calls(tmp_path):
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    out = subprocess.run([sys.executable, str(runner), str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["gc_enabled"] is False
    # the cycle made by each call is collected in that call's window
    assert all(ms >= 50 for ms in res["cyclic"]), res
    # a call's output is freed in the next call's window (the last one's after the request)
    assert res["output"][0] < 50 <= min(res["output"][1:]), res
    # inputs kept alive for two calls, let go of in the third call's window, and freed there
    assert max(res["input"][:2]) < 50 <= min(res["input"][2:]), res
