"""Declarations every public operation of a resident component carries.

- ``@needs_device``: the operation reads or writes device memory or runs collectives. It runs
  inside ``residency.resident(name)``: wakes the component if asleep, restores the previous
  state on exit (also on exceptions). Re-entrant.
- ``@host_only``: the operation works from host copies or metadata and never wakes anything
  (e.g. handing out the host snapshot of the weights). If it touches device memory anyway
  while asleep, the guard's error names it.
- ``@lifecycle``: ``sleep``/``wake`` themselves.

A component without an attached residency (built bare, e.g. in a unit test) runs its
operations directly. ``undeclared_operations(cls)`` is what the architecture test uses.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

NEED_ATTR = "__heron_residency_need__"
NEEDS_DEVICE, HOST_ONLY, LIFECYCLE = "needs_device", "host_only", "lifecycle"


def _declare(fn: Callable, need: str, scope_name: str | None) -> Callable:
    if scope_name is None:
        setattr(fn, NEED_ATTR, need)
        return fn

    @functools.wraps(fn)
    def operation(self, *args, **kwargs):
        residency = getattr(self, "residency", None)
        if residency is None:
            return fn(self, *args, **kwargs)
        with getattr(residency, scope_name)(fn.__name__):
            return fn(self, *args, **kwargs)

    setattr(operation, NEED_ATTR, need)
    return operation


def needs_device(fn: F) -> F:
    """Declares an operation that needs the component's device memory (wakes it)."""
    return _declare(fn, NEEDS_DEVICE, "resident")  # type: ignore[return-value]


def host_only(fn: F) -> F:
    """Declares an operation that runs from host copies or metadata (never wakes)."""
    return _declare(fn, HOST_ONLY, "host_only")  # type: ignore[return-value]


def lifecycle(fn: F) -> F:
    """Declares a residency transition (``sleep``/``wake``)."""
    return _declare(fn, LIFECYCLE, None)  # type: ignore[return-value]


def declared_need(fn: Callable) -> str | None:
    return getattr(fn, NEED_ATTR, None)


def public_operations(cls: type) -> dict[str, Callable]:
    """Public methods and property getters of ``cls`` (inherited included). Classmethods and
    staticmethods are constructors or helpers that run before a component exists: skipped."""
    operations = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, (classmethod, staticmethod)):
            continue
        if isinstance(member, property):
            operations[name] = member.fget
        elif inspect.isfunction(member):
            operations[name] = member
    return operations


def undeclared_operations(cls: type) -> list[str]:
    """Names of public operations of ``cls`` that declare nothing."""
    return sorted(name for name, fn in public_operations(cls).items() if declared_need(fn) is None)
