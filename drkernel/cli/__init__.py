"""The ``drkernel`` command line: one module per command, the parser in :mod:`drkernel.cli.app`.

Every command is a module exposing ``add_arguments(parser)`` and ``main(args) -> int``; the
built-in ones are ``eval_kernel``, ``bench`` and ``data`` here, and ``train``, ``serve`` and
``refine`` live beside the code they drive (``drkernel.local.cli``, ``drkernel.env.service.cli``,
``drkernel.agent.cli``) and are imported only when that command runs.

Exit codes: 0 whenever the command ran (an evaluation whatever its verdict); 1 for ``bench
--strict`` when a task did not pass; 2 with one line on stderr for unusable input (a missing file,
an unreadable task, a command whose module or extra is not installed); 3 when the environment
itself failed (no GPU when one was asked for, a grader that could not start).

Importing this package is light: no torch, no triton until a command runs.
"""

from __future__ import annotations

from drkernel.cli.app import COMMANDS, Command, build_parser, main
from drkernel.cli.common import UsageError

__all__ = ["main", "build_parser", "UsageError", "COMMANDS", "Command"]
