"""Disaggregated weight push over torch.distributed: trainer rank 0 broadcasts to the engines.

The group (rank 0 = trainer rank 0, ranks 1..E = engines) is separate from the trainer's
data-parallel group: it is built from its own ``TCPStore`` and process group (gloo on CPU,
NCCL on CUDA: ``heron.device.new_process_group``, on the process's component device), so
neither group's collectives can mismatch the other's. The host snapshot rank 0 sends is
copied to its device for the broadcast; engines receive on theirs.

One push: rank 0 publishes the layout (buckets of names and shapes, one dtype each) in the
store under the version's key, then broadcasts each bucket as one flat buffer; engines read the
layout, receive into fresh buffers and split them back into named tensors. Every wait is
bounded by the group's timeout.

Why buckets (``cluster.weight_bucket_mb``, as verl's ``update_weights_bucket_megabytes``): one
flat buffer per dtype is a second copy of the whole model on rank 0's host and again on its
device (7 B parameters in float32: 28 GB each) for the length of the push; a bucket bounds that
copy to its size (a tensor larger than a bucket goes alone). Receivers take the push bucket by
bucket too (``PushStream``): an embedded engine copies each bucket into its model as it arrives,
and a vLLM server's worker, a member of its own (``ServerEngine.join_weight_group``), reloads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from heron.device import HOST, new_process_group, to_device
from heron.weights.handle import unique_storages

DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64)}
BUCKET_BYTES = 512 << 20  # cluster.weight_bucket_mb's default


_JOINED: list["WeightBroadcastGroup"] = []


@dataclass(frozen=True)
class Broadcast:
    """A ``WeightSource``: weights that trainer rank 0 is broadcasting to the engines' group
    (``heron.weights.transport.BroadcastTransport`` makes it). An engine whose server's worker
    receives them itself (``ServerEngine.join_weight_group``) never calls ``tensors``."""

    sender: list = field(default_factory=list, repr=False)  # [(ActorRef, ObjectRef)] of rank 0's send
    by_broadcast: ClassVar[bool] = True
    file: ClassVar[str | None] = None

    def tensors(self, version: int) -> dict[str, torch.Tensor]:
        return joined_group().receive(version)

    def pending(self) -> list[Any]:
        return list(self.sender)


def join(addr: str, port: int, rank: int, size: int, timeout_s: float, device: torch.device = HOST,
         bucket_bytes: int = BUCKET_BYTES) -> "WeightBroadcastGroup":
    """Joins this process to the broadcast group (at most one per process: an actor is one
    trainer rank or one engine); ``bucket_bytes`` bounds rank 0's sends."""
    if _JOINED:
        raise RuntimeError("this process already joined a weight broadcast group")
    _JOINED.append(WeightBroadcastGroup(addr, port, rank, size, timeout_s, device, bucket_bytes))
    return _JOINED[0]


def joined_group() -> "WeightBroadcastGroup":
    """The group ``join`` made in this process (a ``Broadcast`` weight source receives on it)."""
    if not _JOINED:
        raise RuntimeError(
            "weights arrive by broadcast but this process joined no broadcast group; "
            "cluster.weight_transport=broadcast needs engine actors (cluster.backend=ray)"
        )
    return _JOINED[0]


class WeightBroadcastGroup:
    def __init__(self, addr: str, port: int, rank: int, size: int, timeout_s: float, device: torch.device = HOST,
                 bucket_bytes: int = BUCKET_BYTES):
        from heron.cluster.rendezvous import make_store

        self.rank = rank
        self.device = device
        self.bucket_bytes = bucket_bytes
        self.store = make_store(addr, port, rank, size, timeout_s)  # served on rank 0's listener
        self.group = new_process_group(self.store, rank, size, timedelta(seconds=timeout_s), device)

    def _broadcast(self, flat: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([flat], options).wait()

    def send(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Rank 0 only. Tied tensors are sent once (the engine accepts either alias)."""
        state = unique_storages(state)
        plan = buckets(state, self.bucket_bytes)
        layout = [{"dtype": dtype, "tensors": [[n, list(state[n].shape)] for n in names]} for dtype, names in plan]
        self.store.set(f"layout/{version}", json.dumps(layout))
        for _, names in plan:
            flat = torch.cat([state[n].detach().reshape(-1) for n in names])  # [the bucket's numel]
            self._broadcast(to_device(flat, self.device))
            del flat  # one bucket's copy alive at a time

    def receive(self, version: int) -> dict[str, torch.Tensor]:
        """Engines: the state rank 0 sends for ``version``, whole."""
        state = {}
        for part in self.stream(version):
            state.update(part)
        return state

    def stream(self, version: int) -> "PushStream":
        """Engines: push ``version`` bucket by bucket, its layout readable before any arrives."""
        return PushStream(self, json.loads(self.store.get(f"layout/{version}")))


class PushStream:
    """One push as it arrives: ``shapes`` (every tensor's, from the published layout) before
    anything is received; iterating receives one bucket at a time ({name: tensor} views of one
    flat buffer on the group's device), so only the bucket being used is held; ``drain`` receives
    whatever is left (a receiver that stops part-way must, or rank 0's send waits on it)."""

    def __init__(self, group: WeightBroadcastGroup, layout: list[dict]):
        self.group = group
        self.layout = layout
        self.next_bucket = 0
        self.failed = False  # a receive raised: the group is broken, drain stops

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return layout_shapes(self.layout)

    def __iter__(self):
        while self.next_bucket < len(self.layout):
            yield self._receive()

    def drain(self) -> None:
        while not self.failed and self.next_bucket < len(self.layout):
            self._receive()

    def _receive(self) -> dict[str, torch.Tensor]:
        bucket = self.layout[self.next_bucket]
        self.next_bucket += 1
        sizes = [math.prod(shape) for _, shape in bucket["tensors"]]
        flat = torch.empty(sum(sizes), dtype=DTYPES[bucket["dtype"]], device=self.group.device)  # [the bucket's numel]
        try:
            self.group._broadcast(flat)
        except Exception:
            self.failed = True
            raise
        return {name: part.view(shape) for (name, shape), part in zip(bucket["tensors"], flat.split(sizes))}


def buckets(state: dict[str, torch.Tensor], limit_bytes: int) -> list[tuple[str, list[str]]]:
    """``state``'s names in sends of one dtype and at most ``limit_bytes`` each, in the order of
    the dtypes' names, then of ``state``; a tensor larger than the limit is a send of its own.
    -> [(dtype name, [tensor names])]."""
    plan: list[tuple[str, list[str]]] = []
    for dtype in sorted({str(t.dtype) for t in state.values()}):
        names: list[str] = []
        size = 0
        for name, tensor in state.items():
            if str(tensor.dtype) != dtype:
                continue
            nbytes = tensor.numel() * tensor.element_size()
            if names and size + nbytes > limit_bytes:
                plan.append((dtype, names))
                names, size = [], 0
            names.append(name)
            size += nbytes
        if names:
            plan.append((dtype, names))
    return plan


def layout_shapes(layout: list[dict]) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in a published push layout ([{"dtype", "tensors": [[name, shape]]}])."""
    return {name: tuple(shape) for bucket in layout for name, shape in bucket["tensors"]}
