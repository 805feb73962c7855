"""The actor's side of residency on the Ray backend: the component hosted by a
``ComponentHost`` gets its own ``Residency`` (state machine + memory backend chosen by
``select_backend``, per ``offload.train`` / ``offload.rollout``), attached with the same
wiring as in one process (``heron.residency.wiring``). The driver's ``ActorResidency`` proxy
drives it through the host's ``sleep`` / ``wake`` / ``memory_report`` methods.

Each actor has its own, non-colocated ``Coordinator``: arbitration between actors sharing a
bundle happens on the driver, where all of them are known. Trainer ranks get no managed
process group: their data-parallel group is the default (WORLD) group that FSDP2/DDP hold,
which cannot be destroyed and recreated under them; it stays alive while a rank sleeps
(on CPU, gloo holds no device buffers; see docs/cluster.md for CUDA).
"""

from __future__ import annotations

from heron.residency.coordinator import Coordinator
from heron.residency.state import Residency
from heron.residency.wiring import attach


def attach_in_actor(component, name: str, offload: bool, wait_timeout_s: float) -> Residency:
    """Attaches a residency to the actor's component for what it declares it holds; with
    offload it then rests asleep."""
    return attach(component, name, component.holdings(), offload=offload,
                  coordinator=Coordinator(colocate=False), wait_timeout_s=wait_timeout_s)
