"""How a trainer on Ray hands its weights to the engines: the one place that picks a transport
(``cluster.weight_transport``) and makes the matching ``WeightHandle``.

Every transport starts from trainer rank 0, which holds the full host snapshot published at the
end of ``train`` (so a push never wakes a rank):

- ``object_store``: rank 0 returns its weights as numpy arrays (zero-copy through Ray's object
  store); the handle carries the object reference, and each engine actor reads it directly —
  the weights never pass through the driver.
- ``disk``: rank 0 writes one safetensors file per version (``weight_dir``, shared by all nodes)
  and the handle carries its path.
- ``broadcast``: rank 0 sends over the torch.distributed group it shares with the engines
  (``heron.weights.broadcast``); the handle's ``pending`` is that send, which the engines'
  receives complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import ray
import torch

from heron.weights.broadcast import Broadcast
from heron.weights.handle import SafetensorsFile, WeightHandle
from heron.weights.wire import from_wire

if TYPE_CHECKING:
    from heron.cluster.remote_call import ActorRef


@dataclass(frozen=True)
class ObjectStore:
    """Weights in Ray's object store (numpy arrays, ``heron.weights.wire``)."""

    ref: Any  # ray.ObjectRef of the wire-format state dict
    by_broadcast: ClassVar[bool] = False
    file: ClassVar[str | None] = None

    def tensors(self, version: int) -> dict[str, torch.Tensor]:
        return from_wire(ray.get(self.ref))

    def pending(self) -> list[Any]:
        return []


class WeightTransport(Protocol):
    def publish(self, rank0: "ActorRef", version: int) -> WeightHandle:
        """Starts making rank 0's weights of ``version`` reachable; returns their handle."""
        ...


class ObjectStoreTransport:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def publish(self, rank0: "ActorRef", version: int) -> WeightHandle:
        from heron.cluster.remote_call import wait_all

        ref = rank0.submit("host_weights")
        wait_all([(rank0, ref)], "weights", self.timeout_s)  # a dead rank surfaces here, not in the engines
        return WeightHandle(version, ObjectStore(ref))


class DiskTransport:
    def __init__(self, folder: str, timeout_s: float):
        self.folder = folder
        self.timeout_s = timeout_s

    def publish(self, rank0: "ActorRef", version: int) -> WeightHandle:
        from heron.cluster.remote_call import wait_all

        path = wait_all([(rank0, rank0.submit_host("write_weights", self.folder, version))], "weights", self.timeout_s)[0]
        return WeightHandle(version, SafetensorsFile(path))


class BroadcastTransport:
    def publish(self, rank0: "ActorRef", version: int) -> WeightHandle:
        # rank 0 sends once the engines receive (their load_weights): do not wait here
        return WeightHandle(version, Broadcast([(rank0, rank0.submit_host("send_weights", version))]))


def build_transport(kind: str, weight_dir: str, timeout_s: float) -> WeightTransport:
    """``cluster.weight_transport`` -> its transport."""
    transports = {
        "object_store": lambda: ObjectStoreTransport(timeout_s),
        "disk": lambda: DiskTransport(weight_dir, timeout_s),
        "broadcast": BroadcastTransport,
    }
    return transports[kind]()
