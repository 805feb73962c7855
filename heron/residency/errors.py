"""Errors of the residency layer: each names the component and the operation involved."""

from __future__ import annotations


class ResidencyError(RuntimeError):
    """A sleep/wake transition that cannot happen (busy component, timeout, failed state)."""


class ReleasedMemoryError(ResidencyError):
    """Code touched the device memory of a component while it was asleep (memory released)."""
