"""What the command modules share: the usage error (exit 2) and small helpers. Standard library only."""

from __future__ import annotations


class UsageError(Exception):
    """Unusable input: reported as one line on stderr, exit code 2. Commands raise it."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu`` (imports torch: call it only when a command runs)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a requirement
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


__all__ = ["UsageError", "first_line", "default_device"]
