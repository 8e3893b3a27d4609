"""Name -> advantage estimator registry.

Every estimator is a pure function of tensors with one shared signature::

    fn(turn_rewards, group_ids, turn_mask=None, gamma=1.0, *, knob=default, ...) -> A

- ``turn_rewards``: float tensor ``(N, T)``, reward r_{i,t} of turn t of trajectory i.
- ``group_ids``: length-N sequence (ints or strings) or 1-D integer tensor; trajectories of the
  same prompt share one id.
- ``turn_mask``: bool tensor ``(N, T)`` (True where the turn exists and is trained) or None.
- ``gamma``: discount across turns.
- extra knobs (e.g. ``norm_by_std`` for GRPO) are keyword arguments with defaults.
- returns float tensor ``(N, T)`` of advantages A_{i,t}, 0 where ``turn_mask`` is False.

The caller picks an estimator by name and never branches on it::

    A = get_advantage(name)(turn_rewards, group_ids, turn_mask, gamma=gamma, **knobs)
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar, Union

import torch

from drkernel._registry import Registry, UnknownNameError

GroupIds = Union[Sequence[object], torch.Tensor]


class AdvantageFn(Protocol):
    """Signature shared by all registered estimators (extra knobs are keyword-only)."""

    def __call__(
        self,
        turn_rewards: torch.Tensor,
        group_ids: GroupIds,
        turn_mask: torch.Tensor | None = None,
        gamma: float = 1.0,
        **knobs: object,
    ) -> torch.Tensor: ...


class UnknownAdvantageError(UnknownNameError):
    """Raised by :func:`get_advantage` for a name that is not registered.

    Subclasses both KeyError (a failed lookup) and ValueError (a bad config value), through
    :class:`drkernel._registry.UnknownNameError`, so either ``except`` clause catches it.
    """


_F = TypeVar("_F", bound=Callable[..., torch.Tensor])
ADVANTAGES: Registry[Callable[..., torch.Tensor]] = Registry("advantage estimator", error=UnknownAdvantageError)
"""Every registered estimator by name (read-only mapping; add with :func:`register_advantage`)."""


def register_advantage(name: str) -> Callable[[_F], _F]:
    """Decorator registering an advantage estimator under ``name``.

    Raises:
        ValueError: ``name`` is not a non-empty string, or is already taken by a different
            function (re-registering the same function, e.g. on module reload, is a no-op).
    """
    return ADVANTAGES.decorator(name)  # type: ignore[return-value]


def get_advantage(name: str) -> AdvantageFn:
    """Return the estimator registered as ``name``.

    Raises:
        UnknownAdvantageError (a KeyError and a ValueError): unknown name; the message lists
            the known names.
    """
    return ADVANTAGES[name]


def list_advantages() -> list[str]:
    """Sorted names of all registered estimators."""
    return ADVANTAGES.names()
