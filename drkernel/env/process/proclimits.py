"""What the grader's process starters share: the limits a child process gets between fork and exec,
and the exit status of a child whose end was seen but whose status was not.

Used by :mod:`drkernel.env.process.sandbox` (workers started by exec) and :mod:`drkernel.env.process.zygote` (the
zygote itself, whose forked workers inherit its limits). Standard library only.
"""

from __future__ import annotations

#: ``returncode`` of a child whose zygote died before reporting its status.
EXIT_UNKNOWN = -1000


def child_limits() -> None:  # runs in the child between fork and exec (a worker's, or a zygote's)
    """No core dumps: a crashing candidate process leaves nothing of its memory on disk."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


__all__ = ["EXIT_UNKNOWN", "child_limits"]
