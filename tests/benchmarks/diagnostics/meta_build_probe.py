"""Why building a model and its inputs on the meta device is slow in a process confined without GPU
device files (the compiler of drkernel.env.precompile): profiles the build step there.

    python tests/benchmarks/diagnostics/meta_build_probe.py [task.py]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    from drkernel.env.confine import confine
    from drkernel.env.task import Task

    task = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "envs" / "single_ops" / "tasks" / "01_relu.py"
    loaded = Task.from_source(task.read_text(), name=task.stem, entry_point="Model").load("full")
    print("confine:", {k: v for k, v in confine(tempfile.mkdtemp(), devices=False).items() if k in ("landlock", "reason")})
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    with torch.device("meta"):
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in loaded.module.get_inputs()]
    prof.disable()
    print(f"meta build {time.perf_counter() - t0:.3f} s, {len(inputs)} inputs")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(18)
    print(s.getvalue()[-3500:])
    for name in ("is_available", "device_count"):
        t0 = time.perf_counter()
        try:
            value = getattr(torch.cuda, name)()
        except Exception as exc:  # noqa: BLE001
            value = repr(exc)
        print(f"torch.cuda.{name}() = {value} in {time.perf_counter() - t0:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
