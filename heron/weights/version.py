"""The served-version check: after a push, every engine must serve the trainer's version."""

from __future__ import annotations


class WeightVersionError(RuntimeError):
    """An engine serves other weights than the trainer pushed (a lost or stale push)."""


def check_served_versions(served: dict[str, int], expected: int) -> None:
    """``served`` maps engine name -> the version it reports; raises naming the first mismatch."""
    for name, version in served.items():
        if version != expected:
            raise WeightVersionError(
                f"{name} serves policy version {version} but the trainer pushed version {expected}; "
                f"samples would come from stale weights"
            )
