"""NumPy's array interfaces turned off in the worker (drkernel.env.guards.array_interfaces): an object that
exposes a raw address is no longer a view of that memory; NumPy, torch's conversions and what
Triton's interpreter uses keep working. In a subprocess (the change is process-wide)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNNER = textwrap.dedent('''
    import ctypes, json
    import numpy as np, torch
    from drkernel.env.guards.array_interfaces import disable_array_interfaces

    secret = bytearray(b"\\x07" * 16)
    address = ctypes.addressof((ctypes.c_char * 16).from_buffer(secret))

    class Raw:
        pass

    def view(typestr):
        r = Raw()
        setattr(r, "__array_" + "interface__", {"data": (address, False), "shape": (2,), "typestr": typestr,
                                                "version": 3})
        return np.asarray(r)

    res = {"before": str(view("<u8").dtype)}
    res["report"] = disable_array_interfaces()
    res["after"] = str(view("<u8").dtype)
    holder = np.zeros(1, dtype=object)
    r = Raw(); setattr(r, "__array_" + "interface__", {"data": (address, False), "shape": (1,), "typestr": "|O",
                                                          "version": 3})
    holder[...] = r
    res["object_view"] = type(holder[0]).__name__
    erf = np.vectorize(lambda v: v * 2.0, otypes=[np.float32])
    res["still"] = [float(np.add(np.ones(3), 1).sum()), float(np.asarray(torch.ones(2)).sum()),
                    float(torch.from_numpy(np.ones(2)).sum()), float(torch.ones(2).numpy().sum()),
                    float(erf(np.ones(2, dtype=np.float32)).sum())]
    print(json.dumps(res))
''')


def test_an_object_with_a_raw_address_is_no_longer_a_view_of_it(tmp_path):
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    out = subprocess.run([sys.executable, str(runner)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["before"] == "uint64"  # the primitive: a view of any address
    assert res["report"]["disabled"] is True, res["report"]
    assert res["after"] == "object" and res["object_view"] == "Raw", res
    assert res["still"] == [6.0, 2.0, 2.0, 2.0, 4.0]
