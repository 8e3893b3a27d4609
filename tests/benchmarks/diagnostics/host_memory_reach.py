"""Can a Triton kernel reach the worker's ordinary (pageable) host memory by address? (CUDA only)

A Triton kernel can turn any integer into a pointer (``tl.cast(addr, tl.pointer_type(...))``). Where
the GPU and driver support *pageable memory access* (HMM, or ATS on Grace systems), such a pointer
may be an address in the process's ordinary heap: a kernel could then read and write Python objects
of the harness (its timings, its records) without any audited operation. This diagnostic reports
the device attribute and tries it: a kernel writes into a ``bytearray``'s buffer by address. The
attempt runs in a child process (without support the kernel faults, and a fault ends the context).

    python tests/benchmarks/diagnostics/host_memory_reach.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ATTEMPT = r'''
import ctypes, json, sys
import torch, triton, triton.language as tl

@triton.jit
def poke(addr, value):
    p = addr.to(tl.pointer_type(tl.int32))
    tl.store(p, value)

buf = bytearray(4096)
addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
torch.empty(1, device="cuda")
try:
    poke[(1,)](addr, 0x5A5A5A5A)
    torch.cuda.synchronize()
    print(json.dumps({"kernel": "ran", "written": buf[:4] == b"\x5a\x5a\x5a\x5a"}))
except Exception as exc:
    print(json.dumps({"kernel": "failed", "error": f"{type(exc).__name__}: {exc}"[:300]}))
'''


def device_attribute() -> dict:
    """``cudaDevAttrPageableMemoryAccess`` (88) and ``...UsesHostPageTables`` (100) through the runtime."""
    import ctypes

    import torch

    torch.empty(1, device="cuda")
    path = next((line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line), "libcudart.so")
    rt = ctypes.CDLL(path)
    out = {}
    for name, attr in (("pageable_memory_access", 88), ("pageable_uses_host_page_tables", 100)):
        v = ctypes.c_int(-1)
        rc = rt.cudaDeviceGetAttribute(ctypes.byref(v), attr, 0)
        out[name] = v.value if rc == 0 else f"error {rc}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = {"attributes": device_attribute()}
    with tempfile.TemporaryDirectory() as tmp:  # (Triton reads a kernel's source from its file)
        script = os.path.join(tmp, "attempt.py")
        with open(script, "w") as fh:
            fh.write(ATTEMPT)
        p = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    res["attempt"] = json.loads(lines[-1]) if lines else {"kernel": "process died", "rc": p.returncode,
                                                           "stderr": p.stderr[-500:]}
    print(json.dumps(res, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
