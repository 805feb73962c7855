"""Residency: the sleep/wake lifecycle of components that hold device memory (design §3).

The only place in heron that releases or restores device memory. See docs/residency.md.
"""

from heron.residency.component import Resident
from heron.residency.coordinator import Coordinator
from heron.residency.declare import host_only, lifecycle, needs_device, undeclared_operations
from heron.residency.errors import ReleasedMemoryError, ResidencyError
from heron.residency.in_flight import Hold
from heron.residency.state import Holdings, Residency, State

__all__ = [
    "Coordinator", "Hold", "Holdings", "ReleasedMemoryError", "Resident", "Residency", "ResidencyError",
    "State", "host_only", "lifecycle", "needs_device", "undeclared_operations",
]
