"""What a candidate's process has imported before the candidate: :data:`PRELOAD`, :func:`preload`.

A zygote imports these once before it forks workers (:mod:`drkernel.env.process.zygote`); a worker started
by exec imports them before it serves (:mod:`drkernel.env.process.worker`), so both start methods give the
candidate the same modules already imported. Standard library only.
"""

from __future__ import annotations

#: What the zygote imports before serving: everything a worker imports before its candidate.
PRELOAD = ("numpy", "torch", "torch.profiler", "torch.utils._python_dispatch", "triton", "triton.language",
           "triton.runtime.cache", "drkernel.env.process.worker", "drkernel.env.protocol", "drkernel.env.measure.launches",
           "drkernel.env.process.tensor_io", "drkernel.env.judge.compare", "drkernel.env.measure.profiling", "drkernel.env.tasks.task",
           "drkernel.env.measure.timing", "drkernel.env.measure.budget", "drkernel.env.guards.audit", "drkernel.env.process.confine",
           "drkernel.env.process.triton_cache", "drkernel.env.guards.hacks", "drkernel.env.faults", "drkernel.env.process.seccomp",
           "drkernel.env.process.precompile",
           # what a compiler (drkernel.env.process.precompile) would import on its first meta tensor and its
           # first compile: 2.3-5 s of every compiler on an H100 machine (sympy; torch._dynamo, which
           # the Python meta kernels of arithmetic import on first use)
           "torch.utils._device", "torch.fx.experimental.symbolic_shapes", "torch._dynamo",
           "triton.compiler.code_generator", "triton.backends.nvidia.driver")


def preload() -> None:
    """Import :data:`PRELOAD` (a zygote before serving; a worker started by exec, so both start
    methods give the candidate the same modules already imported)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
