"""The verifiers taskset ``drkernel-kernels``: verifiers imports a taskset by a top-level module
name, so this module re-exports :mod:`drkernel.integrations.verifiers`'s taskset and the env that
plays it (``--env.taskset.id drkernel-kernels``). Needs the ``verifiers`` extra."""

from drkernel.integrations.verifiers import KernelEnv, KernelTaskset

__all__ = ["KernelTaskset", "KernelEnv"]
