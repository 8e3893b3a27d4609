"""What the command modules share: the one error convention of ``drkernel``, and small helpers.

Exit codes (every command, ``python -m drkernel.train`` and the example scripts built on them):

====  ===========================================================================================
0     success: the command did its job (``eval-kernel``: the evaluation ran, whatever its verdict)
1     the job ran and failed: its answer is a failure (``bench --strict`` with a failing task,
      ``refine`` with a task stopped early) or it broke at run time (an unexpected error)
2     unusable input: a bad flag value, an unknown suite or task, a bad path, a missing optional
      extra (the message names the extra and the ``pip install`` that brings it)
3     something the job needs from outside is unavailable: a dead model endpoint, an unreachable
      grader URL, no GPU for ``--device cuda``, a grader that could not start
====  ===========================================================================================

An error is one line on stderr, ``drkernel <command>: error: <what>``, with no traceback; set
``DRKERNEL_DEBUG=1`` to print the traceback too. Argument-parser errors (an unknown flag, a missing
required one) are argparse's usual usage line plus error line, exit 2.

Commands signal the codes by raising :class:`UsageError` (2), :class:`MissingExtra` (2),
:class:`ServiceUnavailable` (3) or :class:`JobFailed` (1), or by returning the code;
:class:`drkernel.env.result.EnvironmentFailure` from the grader is 3, any other exception 1.
Standard library only: importing this module imports neither torch nor drkernel's layers.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class UsageError(Exception):
    """Unusable input (a bad flag value, an unknown suite or task, a bad path): exit 2, one line."""

    exit_code = EXIT_USAGE


class MissingExtra(UsageError):
    """An optional dependency is not installed: exit 2 with the extra and the pip command."""

    def __init__(self, extra: str, what: str, missing: str | None = None):
        self.extra = extra
        self.missing = missing
        because = f" (no module {missing!r})" if missing else ""
        super().__init__(f"{what} needs the '{extra}' extra{because}: {pip_hint(extra)}")


class ServiceUnavailable(Exception):
    """An external service the command needs does not answer (a dead endpoint, an unreachable
    grader URL): exit 3, one line naming it."""

    exit_code = EXIT_UNAVAILABLE


class JobFailed(Exception):
    """The job ran and its answer is a failure: exit 1, one line."""

    exit_code = EXIT_FAILED


def pip_hint(extra: str | None) -> str:
    """The command that installs ``extra`` into a drkernel checkout (``pip install -e '.[train]'``)."""
    return f"pip install -e '.[{extra}]'" if extra else "pip install -e ."


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def debug() -> bool:
    """``DRKERNEL_DEBUG=1``: print tracebacks of reported errors."""
    return os.environ.get("DRKERNEL_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def error(prog: str, message: str) -> None:
    """Print ``<prog>: error: <message>`` (its first line) on stderr."""
    text = message.strip().splitlines()[0] if message.strip() else message
    print(f"{prog}: error: {text}", file=sys.stderr)


def notice(prog: str, message: str) -> None:
    """Print ``<prog>: note: <message>`` on stderr (not an error: deprecations, an open server)."""
    print(f"{prog}: note: {message}", file=sys.stderr)


def _is_environment_failure(exc: BaseException) -> bool:
    module = sys.modules.get("drkernel.env.result")  # raised only where the grader was imported
    cls = getattr(module, "EnvironmentFailure", None)
    return cls is not None and isinstance(exc, cls)


def exit_code_of(exc: BaseException) -> int:
    """The exit code of an exception that ends a command (module doc)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and isinstance(exc, (UsageError, ServiceUnavailable, JobFailed)):
        return code
    if _is_environment_failure(exc):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def run_command(prog: str, func: Callable[[Any], Any], args: Any) -> int:
    """Run ``func(args)`` under the convention: its return value (None = 0) is the exit code; an
    exception is one line on stderr and its exit code (module doc)."""
    try:
        return int(func(args) or 0)
    except BrokenPipeError:  # pragma: no cover - `drkernel ... | head`
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the convention: one line, an exit code
        code = exit_code_of(exc)
        if debug():
            traceback.print_exc()
        if isinstance(exc, (UsageError, ServiceUnavailable, JobFailed)):
            message = first_line(exc)
        elif code == EXIT_UNAVAILABLE:
            message = f"environment failure: {first_line(exc)}"
        else:
            message = f"{type(exc).__name__}: {first_line(exc)}" + ("" if debug() else
                                                                      " (DRKERNEL_DEBUG=1 prints the traceback)")
        error(prog, message)
        return code


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu`` (imports torch: call it only when a command runs)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a requirement
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def suites_in(*roots: str | os.PathLike) -> list[str]:
    """Suite directories (holding an ``env.yaml``) directly under ``roots`` that exist, as given paths."""
    found: list[str] = []
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            if (d / "env.yaml").is_file() and str(d) not in found:
                found.append(str(d))
    return found


def load_suite_arg(path: str, flag: str = "--suite") -> Any:
    """The suite at ``path``, or :class:`UsageError` naming it and the suites that exist (those
    beside it and under ``./envs``)."""
    from drkernel.env.tasks.suite import SuiteError, load_suite

    try:
        return load_suite(path)
    except SuiteError as exc:
        parent = Path(path).parent if str(Path(path).parent) not in ("", ".") else Path("envs")
        known = suites_in(parent, "envs")
        hint = f"; suites: {', '.join(known)}" if known else "; no suite directory (with an env.yaml) found under ./envs"
        raise UsageError(f"{flag} {path}: {first_line(exc)}{hint}") from None


def select_tasks_arg(suite: Any, pattern: str | None, flag: str = "--tasks") -> list[Any]:
    """The suite's tasks matching ``pattern`` (comma-separated globs/substrings), or
    :class:`UsageError` naming the part that matches no task and the task ids that exist."""
    parts = [p.strip() for p in (pattern or "").split(",") if p.strip()]
    for part in parts:
        if not suite.select(part):
            ids = [t.id for t in suite.tasks]
            shown = ", ".join(ids[:40]) + (f", ... ({len(ids)} in all)" if len(ids) > 40 else "")
            raise UsageError(f"{flag}: {part!r} matches no task of suite {suite.id}; tasks: {shown}")
    return suite.select(pattern)


__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_UNAVAILABLE", "UsageError", "MissingExtra",
           "ServiceUnavailable", "JobFailed", "pip_hint", "first_line", "debug", "error", "notice", "exit_code_of",
           "run_command", "default_device", "suites_in", "load_suite_arg", "select_tasks_arg"]
