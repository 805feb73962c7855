"""``ComponentHost``: the Ray actor that hosts one component (engine or trainer rank).

The host is generic: ``build`` runs a builder function (the same one the local executor
calls) inside the actor, and ``call`` runs a method of the built component. Weights are
converted at the boundary (``heron.weights.wire``) so the component itself never knows it
is remote.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Callable

import ray


@ray.remote
class ComponentHost:
    def __init__(self, name: str, num_threads: int = 1):
        import torch

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        torch.set_num_threads(max(1, num_threads))
        self.name = name
        self.component: Any = None
        self.weight_group = None  # heron.weights.broadcast.WeightBroadcastGroup, if joined

    def rendezvous_address(self) -> tuple[str, int]:
        """This node's address and a free TCP port: the trainer group's rendezvous point."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def build(self, builder: Callable, *args, **kwargs) -> str:
        self.component = builder(*args, **kwargs)
        return type(self.component).__name__

    def call(self, method: str, *args, **kwargs) -> Any:
        from heron.weights.wire import from_wire, to_wire

        args = tuple(from_wire(a) for a in args)
        return to_wire(getattr(self.component, method)(*args, **kwargs))

    def call_to_file(self, method: str, folder: str, version: int) -> Any:
        """Runs a method returning a state dict and writes it as a versioned safetensors file
        (disk weight transport); returns the ``WeightFile``, or None where the dict is empty."""
        from heron.weights.wire import save_weight_file

        state = getattr(self.component, method)()
        return save_weight_file(state, folder, version) if state else None

    def join_weight_group(self, addr: str, port: int, rank: int, size: int, timeout_s: float) -> None:
        from heron.weights.broadcast import WeightBroadcastGroup

        self.weight_group = WeightBroadcastGroup(addr, port, rank, size, timeout_s)

    def send_weights(self, version: int) -> None:
        """Trainer rank 0: gathers the weights (with the other ranks) and broadcasts them."""
        self.weight_group.send(self.component.weights(), version)

    def receive_weights(self, version: int) -> int:
        """Engines: receives the broadcast, loads it; returns the version now served."""
        self.component.load_weights(self.weight_group.receive(version), version)
        return self.component.policy_version

    def apply(self, fn: Callable, *args) -> Any:
        """Runs ``fn(component, *args)``: free functions over the component (e.g. DCP state I/O).
        They read device memory, so they run in a resident scope (wakes an offloaded component)."""
        residency = getattr(self.component, "residency", None)
        if residency is None:
            return fn(self.component, *args)
        with residency.resident(getattr(fn, "__name__", "apply")):
            return fn(self.component, *args)

    # --- residency (heron.cluster.actor_residency; driven by the driver's ActorResidency) ---
    def attach_residency(self, offload: bool, wait_timeout_s: float) -> str:
        """Gives the component its own residency; returns its state (asleep when offloaded)."""
        from heron.cluster.actor_residency import attach_in_actor

        return attach_in_actor(self.component, self.name, offload, wait_timeout_s).state.value

    def sleep(self) -> tuple[str, dict[str, int]]:
        """Releases the component's device memory; returns (state, bytes released per category)."""
        self.component.sleep()
        return self.component.residency.state.value, dict(self.component.residency.released_bytes)

    def wake(self) -> str:
        self.component.wake()
        return self.component.residency.state.value

    def residency_state(self) -> str:
        return self.component.residency.state.value

    def memory_report(self) -> dict[str, int]:
        """Device bytes the component holds now, per category."""
        return self.component.memory_report()

    def close(self) -> None:
        """Stops what the component owns outside this process (a server engine's server)."""
        if hasattr(self.component, "close"):
            self.component.close()

    def get(self, attribute: str) -> Any:
        return getattr(self.component, attribute)

    def pid(self) -> int:
        return os.getpid()
