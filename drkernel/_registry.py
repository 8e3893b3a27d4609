"""One name -> object registry, shared by every registry in drkernel.

Advantage estimators, prompt templates and reward functions are all picked by a name from a
config; this module makes them behave the same way:

* ``register(name, obj)`` (or ``@registry.decorator(name)``) adds ``obj``; registering the *same*
  object again is a no-op (a module imported twice, ``importlib.reload``), but a taken name with a
  *different* object is an error naming both, so a plugin can never silently replace a built-in;
* ``registry[name]`` returns it; an unknown name raises :class:`UnknownNameError` (both a ``KeyError``
  and a ``ValueError``) whose message lists the known names;
* ``names()`` lists the registered names, sorted.

The module imports nothing beyond the standard library, so any layer may use it.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, Mapping, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name that is not registered.

    A ``KeyError`` (a failed lookup) and a ``ValueError`` (a bad config value), so either ``except``
    clause catches it; ``str(err)`` is the plain message (``KeyError`` would quote it).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def describe(obj: object) -> str:
    """How an error names a registered object: ``module.qualname`` for functions and classes, else repr."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname:
        return f"{module}.{qualname}"
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


def same_definition(a: object, b: object) -> bool:
    """True for one object, or for the same function/class defined again by a module reload."""
    if a is b:
        return True
    qualname = getattr(a, "__qualname__", None)
    return (qualname is not None and qualname == getattr(b, "__qualname__", None)
            and getattr(a, "__module__", None) == getattr(b, "__module__", None))


class Registry(Mapping[str, T], Generic[T]):
    """Objects of one kind by name. Read-only as a ``Mapping``; add with :meth:`register`.

    Args:
        kind: what is registered, for messages (``"advantage estimator"``).
        same: when re-registering a taken name counts as the same object (default
            :func:`same_definition`; prompt templates compare by value).
        error: the exception class raised for an unknown name (a subclass of
            :class:`UnknownNameError`, so callers may catch either).
    """

    def __init__(self, kind: str, *, same: Callable[[T, T], bool] = same_definition,
                 error: type[UnknownNameError] = UnknownNameError):
        self.kind = kind
        self._same = same
        self._error = error
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T) -> T:
        """Add ``obj`` under ``name`` and return it.

        Raises:
            ValueError: ``name`` is not a non-empty string, or is taken by a different object.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        taken = self._items.get(name)
        if taken is not None and not self._same(taken, obj):
            raise ValueError(f"{self.kind} {name!r} is already registered to {describe(taken)}; "
                             f"cannot register {describe(obj)} under the same name (pick another name)")
        self._items[name] = obj
        return obj

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator("name")``: register the decorated object. The name is checked at once."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def deco(obj: T) -> T:
            return self.register(name, obj)

        return deco

    def unregister(self, name: str) -> None:
        """Remove ``name`` if present (tests and plugins cleaning up after themselves)."""
        self._items.pop(name, None)

    def __getitem__(self, name: str) -> T:
        """The object registered as ``name`` (``registry[name]``; ``registry.get(name)`` returns None instead).

        Raises:
            UnknownNameError (the registry's ``error`` class): the message lists the known names.
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):
            known = ", ".join(repr(n) for n in self.names()) or "(none)"
            raise self._error(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


__all__ = ["Registry", "UnknownNameError", "describe", "same_definition"]
