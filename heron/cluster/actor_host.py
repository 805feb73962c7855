"""``ComponentHost``: the Ray actor that hosts one component (engine or trainer rank).

The host is generic: ``build`` runs a builder function (the same one the local executor
calls) inside the actor, and ``call`` runs a method of the built component. Weights are
converted at the boundary (``heron.weights.wire``) so the component itself never knows it
is remote.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

import ray

if TYPE_CHECKING:
    from heron.tracking.profiler import ProfileFiles


@ray.remote(concurrency_groups={"io": 1})  # methods run one at a time, except the io group's (own thread)
class ComponentHost:
    def __init__(self, name: str, num_threads: int = 1):
        import torch

        from heron.cluster.rendezvous import pin_gloo_to_loopback
        from heron.device import prepare_process_groups

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        pin_gloo_to_loopback()  # before any gloo group: a local Ray's groups stay on 127.0.0.1
        prepare_process_groups()  # and gloo connects its pairs on first use (heron.device)
        torch.set_num_threads(max(1, num_threads))
        self.name = name
        self.component: Any = None
        self.capture = None  # the profiler between start_profile and stop_profile

    def rendezvous_address(self) -> tuple[str, int]:
        """A group's rendezvous point, served by this actor: this node's Ray address and a port
        it now listens on (``heron.cluster.rendezvous``; the group's store takes it over)."""
        from heron.cluster.rendezvous import open_listener

        return open_listener()

    def build(self, builder: Callable, *args, **kwargs) -> str:
        self.component = builder(*args, **kwargs)
        return type(self.component).__name__

    def call(self, method: str, *args, **kwargs) -> Any:
        """Runs ``component.method(*args, **kwargs)``; a tensor state dict comes back as numpy
        arrays (``heron.weights.wire``: zero-copy through the object store)."""
        from heron.weights.wire import to_wire

        return to_wire(getattr(self.component, method)(*args, **kwargs))

    def write_weights(self, folder: str, version: int) -> str:
        """Trainer rank 0, disk weight transport: writes its host weights as a versioned
        safetensors file; returns the path."""
        from heron.weights.handle import SafetensorsFile

        return SafetensorsFile.write_version(self.component.host_weights(), folder, version).path

    def join_weight_group(self, addr: str, port: int, rank: int, size: int, timeout_s: float, bucket_bytes: int) -> None:
        """Trainer rank 0 joins the weight broadcast group as its sender (the engines join through
        their own ``join_weight_group``: a server's worker may join instead of the actor)."""
        from heron.weights import broadcast

        broadcast.join(addr, port, rank, size, timeout_s, device=self.component.device, bucket_bytes=bucket_bytes)

    def send_weights(self, version: int) -> None:
        """Trainer rank 0: broadcasts its host weights to the engines of the group."""
        from heron.weights.broadcast import joined_group

        joined_group().send(self.component.host_weights(), version)

    @ray.method(concurrency_group="io")
    def wait_saved(self) -> dict[str, str]:
        """Waits for the component's checkpoint shards in flight (``Trainer.wait_saved``). Runs in
        its own concurrency group: an async save's wait must not queue the rank's next ``train``
        behind the file writes (actor calls otherwise run one at a time, in order)."""
        return self.component.wait_saved()

    # --- residency (heron.cluster.actor_residency; driven by the driver's proxies) ---
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
        self.component.close()  # hosted engines only (RolloutEngine.close)

    # --- profiling (heron.tracking.profiler; the driver opens and closes the window) ---
    def start_profile(self, cfg) -> None:
        """Starts torch.profiler in this actor, over the calls that follow (a ``ProfileConfig``)."""
        from heron.tracking.profiler import Capture

        self.capture = Capture(cfg)

    def stop_profile(self) -> ProfileFiles | None:
        """Stops the profiler ``start_profile`` started -> (trace JSON text, operator tables), or
        None when none runs (start failed, or the window was already closed)."""
        capture, self.capture = self.capture, None
        return None if capture is None else capture.finish()

    def get(self, attribute: str) -> Any:
        return getattr(self.component, attribute)

    def pid(self) -> int:
        return os.getpid()
