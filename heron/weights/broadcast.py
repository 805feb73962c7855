"""Disaggregated weight push over torch.distributed: trainer rank 0 broadcasts to the engines.

The group (rank 0 = trainer rank 0, ranks 1..E = engines) is separate from the trainer's
data-parallel group: it is built from its own ``TCPStore`` and process group (gloo on CPU,
NCCL on CUDA: ``heron.device.new_process_group``, on the process's component device), so
neither group's collectives can mismatch the other's. The host snapshot rank 0 sends is
copied to its device for the broadcast; engines receive on theirs.

One push: rank 0 publishes the layout (names, shapes, dtypes) in the store under the
version's key, then broadcasts one flat buffer per dtype; engines read the layout, receive
into fresh buffers and split them back into named tensors. Every wait is bounded by the
group's timeout.
"""

from __future__ import annotations

import json
from datetime import timedelta

import torch
import torch.distributed as dist

from heron.device import HOST, new_process_group, to_device
from heron.weights.handle import unique_storages

DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64)}


_JOINED: list["WeightBroadcastGroup"] = []


def join(addr: str, port: int, rank: int, size: int, timeout_s: float, device: torch.device = HOST) -> "WeightBroadcastGroup":
    """Joins this process to the broadcast group (at most one per process: an actor is one
    trainer rank or one engine)."""
    if _JOINED:
        raise RuntimeError("this process already joined a weight broadcast group")
    _JOINED.append(WeightBroadcastGroup(addr, port, rank, size, timeout_s, device))
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
    def __init__(self, addr: str, port: int, rank: int, size: int, timeout_s: float, device: torch.device = HOST):
        from heron.cluster.rendezvous import make_store

        self.rank = rank
        self.device = device
        self.store = make_store(addr, port, rank, size, timeout_s)  # served on rank 0's listener
        self.group = new_process_group(self.store, rank, size, timedelta(seconds=timeout_s), device)

    def _broadcast(self, flat: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([flat], options).wait()

    def send(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Rank 0 only. Tied tensors are sent once (the engine accepts either alias)."""
        state = unique_storages(state)
        names = list(state)
        layout = [(n, list(state[n].shape), str(state[n].dtype)) for n in names]
        self.store.set(f"layout/{version}", json.dumps(layout))
        for dtype in sorted({d for _, _, d in layout}):
            flat = torch.cat([state[n].detach().reshape(-1) for n, _, d in layout if d == dtype])  # [sum of numels]
            self._broadcast(to_device(flat, self.device))

    def receive(self, version: int) -> dict[str, torch.Tensor]:
        """Engines: the state rank 0 sends for ``version``."""
        layout = json.loads(self.store.get(f"layout/{version}"))
        state = {}
        for dtype in sorted({d for _, _, d in layout}):
            entries = [(n, shape) for n, shape, d in layout if d == dtype]
            flat = torch.empty(sum(_numel(s) for _, s in entries), dtype=DTYPES[dtype], device=self.device)  # [sum of numels]
            self._broadcast(flat)
            for (name, shape), part in zip(entries, flat.split([_numel(s) for _, s in entries])):
                state[name] = part.view(shape)
        return state


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
