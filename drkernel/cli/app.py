"""The ``drkernel`` parser: a table of commands, each a module imported only when it runs.

A command module exposes two functions::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def main(args: argparse.Namespace) -> int: ...   # the exit code

A command module that sets ``PASSTHROUGH = True`` receives the arguments its parser does not know
as ``args.passthrough`` (``drkernel train --backend verl`` hands them to Hydra) instead of an error.

Errors follow the one convention of :mod:`drkernel.cli.common` (exit 0 success, 1 the job failed,
2 unusable input, 3 an external service unavailable; one line ``drkernel <command>: error: ...`` on
stderr, no traceback unless ``DRKERNEL_DEBUG=1``). Building the parser imports only the module of
the command being run, so ``drkernel --help`` lists every command without importing torch, and a
command whose module (or one of its dependencies) is not installed is still listed; running it
exits 2 with one line naming what is missing and the extra that provides it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Sequence

from drkernel.cli.common import EXIT_USAGE, UsageError, error, pip_hint, run_command


@dataclass(frozen=True)
class Command:
    """One ``drkernel`` subcommand."""

    name: str
    """What the user types: ``drkernel <name>``."""
    module: str
    """Dotted module exposing ``add_arguments(parser)`` and ``main(args) -> int``."""
    help: str
    """One line for ``drkernel --help``."""
    extra: str | None = None
    """The extra (``pip install -e '.[<extra>]'``) that brings the command's dependencies, if any."""


COMMANDS: tuple[Command, ...] = (
    Command("eval-kernel", "drkernel.cli.eval_kernel", "grade one candidate ModelNew against a KernelBench-format task",
            extra="env"),
    Command("bench", "drkernel.cli.bench", "grade a directory of candidates against a task suite", extra="env"),
    Command("data", "drkernel.cli.data", "build training data from a suite, import KernelBench"),
    Command("train", "drkernel.cli.train",
            "train a policy: the one-process trainer (default) or verl on a cluster (--backend verl)",
            extra="env,local"),
    Command("serve", "drkernel.cli.serve", "serve graders over HTTP to a training cluster", extra="env,serve"),
    Command("refine", "drkernel.cli.refine", "multi-turn refinement (test-time scaling) against a model endpoint",
            extra="env,agent"),
)
"""Every command, in ``--help`` order."""


def _pip_hint(command: Command) -> str:
    return pip_hint(command.extra)


def _import_command(command: Command) -> ModuleType | str:
    """The command's module, or one line saying what is missing when it (or a dependency) is not installed."""
    try:
        module = importlib.import_module(command.module)
    except ModuleNotFoundError as exc:
        missing = exc.name or "?"
        if command.module == missing or command.module.startswith(missing + "."):
            missing = command.module
        if missing == "drkernel" or missing.startswith("drkernel."):
            return (f"'{command.name}' needs module {missing}, which this drkernel install does not have "
                    f"({_pip_hint(command)})")
        return (f"'{command.name}' needs the package {missing!r}, which is not installed "
                f"({_pip_hint(command)})")
    for fn in ("add_arguments", "main"):
        if not callable(getattr(module, fn, None)):
            raise TypeError(f"{command.module} is not a drkernel command module: it does not define {fn}()")
    return module


def _unavailable(message: str):
    def run(args: argparse.Namespace) -> int:
        raise UsageError(message)

    return run


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first token that is not an option), or None."""
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-"):
            return token
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``drkernel`` parser with every command listed; only ``command``'s module is imported and
    its arguments added (None adds none: enough for ``drkernel --help``)."""
    parser = argparse.ArgumentParser(prog="drkernel", description=_summary(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        if cmd.name != command:
            sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
            continue
        loaded = _import_command(cmd)
        if isinstance(loaded, str):  # listed, runnable only to say what is missing
            p = sub.add_parser(cmd.name, help=cmd.help, add_help=False)
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            p.set_defaults(func=_unavailable(loaded))
            continue
        passthrough = bool(getattr(loaded, "PASSTHROUGH", False))
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, allow_abbrev=not passthrough,
                           formatter_class=argparse.RawDescriptionHelpFormatter if passthrough else argparse.HelpFormatter)
        loaded.add_arguments(p)
        p.set_defaults(passthrough=[] if passthrough else None)
        p.set_defaults(func=loaded.main)
    return parser


def _summary() -> str:
    return ("drkernel: multi-turn agentic RL for Triton kernel generation.\n\n"
            "Exit codes: 0 success; 1 the job ran and failed; 2 unusable input (a bad flag value, an unknown\n"
            "suite or task, a bad path, a missing extra); 3 an external service unavailable (a dead endpoint,\n"
            "an unreachable grader). Errors are one line on stderr; DRKERNEL_DEBUG=1 adds the traceback.")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``drkernel`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_in(argv)
    known = {cmd.name: cmd for cmd in COMMANDS}
    if command in known and not any(a in ("-h", "--help") for a in argv[:argv.index(command)]):
        loaded = _import_command(known[command])
        if isinstance(loaded, str):  # before parsing: its arguments are unknown
            error(f"drkernel {command}", loaded)
            return EXIT_USAGE
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "passthrough", None) is None:
        parser.parse_args(argv)  # argparse's own "unrecognized arguments" error, exit 2
    if getattr(args, "passthrough", None) is not None:
        args.passthrough = extra
    return run_command(f"drkernel {args.command}", args.func, args)


__all__ = ["COMMANDS", "Command", "build_parser", "command_in", "main"]
