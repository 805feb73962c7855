"""``RemoteCritic``: the driver's stand-in for the critic's actor on the Ray backend, with the
verbs the run uses on a ``Critic`` (``values``, ``train``, ``save_state``, ``wait_saved``,
``load_state``).

The critic runs in one ``ComponentHost`` actor on trainer rank 0's bundle, built by the same
``build_critic`` as in one process; it trains on the whole batch (not sharded over ranks: it
has no data-parallel group). Its residency is attached inside the actor and proxied on the
driver like a trainer rank's (``heron.cluster.remote_residency``), so colocated it takes turns
with rank 0 and the engine on that bundle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from heron.checkpoint.shards import SavedShards, ShardRequest
from heron.cluster.remote_call import ActorRef, wait_all
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.trainer.batch import TrainBatch

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint


class RemoteCritic(Resident):
    def __init__(self, actor: ActorRef, timeout_s: float):
        self.actor = actor
        self.timeout_s = timeout_s

    def _call(self, method: str, *args):
        return wait_all([(self.actor, self.actor.submit(method, *args))], method, self.timeout_s)[0]

    @needs_device
    def values(self, batch: TrainBatch) -> torch.Tensor:
        """``Critic.values``: V_t [B, L-1] at the critic's current weights."""
        return self._call("values", batch)  # [B, L-1] floats: small enough to pickle

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        return self._call("train", batch)

    @host_only
    def holdings(self) -> Holdings:
        """Nothing in this process: the actor declares its own (``Critic.holdings``)."""
        return Holdings()

    @needs_device
    def save_state(self, request: ShardRequest) -> SavedShards:
        return self._call("save_state", request)

    @host_only
    def wait_saved(self) -> dict[str, str]:
        """The critic's checksums once its shard write has finished (from host copies: it does not wake)."""
        return wait_all([(self.actor, self.actor.submit_host("wait_saved"))], "wait_saved", self.timeout_s)[0]

    @needs_device
    def load_state(self, checkpoint: Checkpoint) -> None:
        self._call("load_state", checkpoint)
