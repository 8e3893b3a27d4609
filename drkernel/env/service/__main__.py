"""``python -m drkernel.env.service [options]`` (deprecated): runs ``drkernel serve [options]``."""

import runpy
import sys

print("drkernel: note: `python -m drkernel.env.service` is deprecated: use `drkernel serve`", file=sys.stderr)
sys.argv[1:1] = ["serve"]
runpy.run_module("drkernel", run_name="__main__", alter_sys=True)
