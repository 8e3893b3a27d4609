"""The ``drkernel`` command line: every command is a module here, the parser in :mod:`drkernel.cli.app`.

    drkernel eval-kernel   grade one candidate                      drkernel.cli.eval_kernel
    drkernel bench         grade a directory of candidates           drkernel.cli.bench
    drkernel data          build training data, import KernelBench   drkernel.cli.data
    drkernel train         the local trainer; --backend verl: verl   drkernel.cli.train
    drkernel serve         the grading HTTP service                  drkernel.cli.serve
    drkernel refine        multi-turn refinement / test-time scaling drkernel.cli.refine

A command module exposes ``add_arguments(parser)`` and ``main(args) -> int``: it parses, calls the
library (``drkernel.env``, ``drkernel.agent``, ``drkernel.local``, ``drkernel.serve``,
``drkernel.verl`` ...), prints and returns the exit code. The layers below never import this
package. Each command module is imported only when that command runs.

One error convention (:mod:`drkernel.cli.common`): exit 0 success; 1 the job ran and failed; 2
unusable input (bad flag value, unknown suite or task, bad path, missing optional extra: the message
names the extra and its ``pip install``); 3 an external service unavailable (dead endpoint,
unreachable grader URL, no GPU). Errors are one line on stderr, ``drkernel <command>: error: ...``,
without a traceback unless ``DRKERNEL_DEBUG=1``.

Importing this package is light: no torch, no triton until a command runs.
"""

from __future__ import annotations

from drkernel.cli.app import COMMANDS, Command, build_parser, main
from drkernel.cli.common import JobFailed, MissingExtra, ServiceUnavailable, UsageError

__all__ = ["main", "build_parser", "UsageError", "MissingExtra", "ServiceUnavailable", "JobFailed", "COMMANDS",
           "Command"]
