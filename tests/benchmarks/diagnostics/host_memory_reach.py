"""Can a kernel reach the worker's ordinary (pageable) host memory by address? (CUDA only)

A Triton kernel can turn any integer into a pointer. It reaches the process's device memory and its
page-locked, mapped host memory that way (unified addressing). Where the GPU and driver also support
*pageable memory access* (HMM, or ATS on Grace systems), such a pointer may be an address in the
process's ordinary heap: a kernel could then read and write the harness's Python objects without any
audited operation. This reports the device's attributes through the CUDA runtime:
``cudaDevAttrPageableMemoryAccess`` (88) and ``cudaDevAttrPageableMemoryAccessUsesHostPageTables``
(100); 0 means a kernel cannot touch pageable memory that was not registered (``cudaHostRegister``,
refused to the candidate: drkernel.env.guards.audit).

    python tests/benchmarks/diagnostics/host_memory_reach.py [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys


def device_attributes(device: int = 0) -> dict:
    import torch

    torch.empty(1, device=f"cuda:{device}")  # the runtime torch loaded is now mapped
    with open("/proc/self/maps") as fh:
        path = next((line.split()[-1] for line in fh if "libcudart" in line), "libcudart.so")
    rt = ctypes.CDLL(path)
    out = {"device": torch.cuda.get_device_name(device), "runtime": path}
    for name, attr in (("pageable_memory_access", 88), ("pageable_uses_host_page_tables", 100)):
        v = ctypes.c_int(-1)
        rc = rt.cudaDeviceGetAttribute(ctypes.byref(v), attr, device)
        out[name] = v.value if rc == 0 else f"error {rc}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = device_attributes()
    print(json.dumps(res, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
