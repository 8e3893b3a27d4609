"""GPU probe for the grader's design: what the CUDA profiler (kineto/CUPTI) records for the kinds of
work a candidate can do (own Triton kernels under a renamed entry, aten kernels, cuBLAS, DtoH copies,
side streams, CUDA graph replay), what starting and stopping it costs, whether Landlock confinement
leaves CUDA and Triton compilation working, and which audit events this Python raises.

Run on a CUDA machine: python tests/benchmarks/diagnostics/cupti_probe.py OUT_DIR
"""
import json
import os
import sys
import time

out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
res: dict = {"python": sys.version}

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile


@triton.jit
def drkernel_fence_begin(p):
    tl.store(p, tl.load(p) + 1)


@triton.jit
def relu_kernel(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y + i, tl.maximum(tl.load(x + i, mask=m), 0.0), mask=m)


relu_kernel._fn_name = relu_kernel._fn_name + "__dkabc123"  # the grader's renaming
dev = "cuda"
x = torch.randn(1 << 22, device=dev)
y = torch.empty_like(x)
a = torch.randn(1024, 1024, device=dev)
buf = torch.zeros(1, device=dev)
compiled = drkernel_fence_begin[(1,)](buf)
relu_kernel[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
res["fence_run_type"] = str(type(compiled.run))
res["fence_name"] = compiled.name
torch.cuda.synchronize()
side = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    gy = torch.sigmoid(x)
torch.cuda.synchronize()

t = time.perf_counter()
prof = profile(activities=[ProfilerActivity.CUDA])
prof.start()
res["profiler_start_s"] = time.perf_counter() - t
for i in range(3):
    compiled.run(1, 1, 1, 0, compiled.function, compiled.packed_metadata, None, None, None, buf)
    relu_kernel[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
    torch.relu(x)
    torch.mm(a, a)
    x[:16384].cpu()
    with torch.cuda.stream(side):
        torch.tanh(x)
    g.replay()
    drkernel_fence_begin[(1,)](buf)
torch.cuda.synchronize()
t = time.perf_counter()
prof.stop()
res["profiler_stop_s"] = time.perf_counter() - t
KE = torch._C._autograd._KinetoEvent
rows = []
for e in prof.profiler.kineto_results.events():
    if "CUDA" not in str(KE.device_type(e)):
        continue
    row = {}
    for attr in ("name", "device_type", "start_ns", "duration_ns", "device_resource_id", "nbytes",
                 "correlation_id", "linked_correlation_id", "metadata_json", "activity_type"):
        fn = getattr(KE, attr, None)
        if fn is not None:
            try:
                v = fn(e)
                row[attr] = v[:160] if isinstance(v, str) else (v if isinstance(v, (int, float)) else str(v))
            except Exception as exc:  # noqa: BLE001
                row[attr] = f"error {exc}"
    rows.append(row)
rows.sort(key=lambda r: r.get("start_ns", 0))
res["events"] = rows

# cost of a long session: 300 small calls
prof = profile(activities=[ProfilerActivity.CUDA])
t = time.perf_counter()
prof.start()
for i in range(300):
    relu_kernel[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
t1 = time.perf_counter()
prof.stop()
res["session_300"] = {"run_s": t1 - t, "stop_s": time.perf_counter() - t1,
                      "n": len(prof.profiler.kineto_results.events())}

# Landlock in a forked child after CUDA init: is CUDA + a new Triton compile still fine?
import ctypes
import tempfile

def landlock_child(workdir):
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, 0, 1)
    return abi

res["landlock_abi"] = landlock_child(None)
res["audit_thread_event"] = None
events = []
sys.addaudithook(lambda e, a: events.append(e) if "thread" in e else None)
import threading
threading.Thread(target=lambda: None).start()
res["audit_thread_event"] = events[:5]
with open(os.path.join(out_dir, "cupti_probe.json"), "w") as fh:
    json.dump(res, fh, indent=1, default=str)
print(json.dumps({k: v for k, v in res.items() if k != "events"}, default=str))
for r in rows:
    print(r)
