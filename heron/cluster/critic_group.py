"""``CriticGroup``: the driver's stand-in for the critic's ``train.world_size`` rank actors on
the Ray backend, with the verbs the run uses on a ``Critic`` (``values``, ``train``,
``save_state``, ``wait_saved``, ``load_state``).

Critic rank r runs on trainer rank r's bundle (taking turns with it when colocated) and is a
``DataParallelCritic`` (heron.parallel.dp_critic): the ranks form their own torch.distributed
group (FSDP2 or DDP as ``train.parallel``), separate from the trainer ranks'. ``values`` gives
each rank an equal share of the rows; ``train`` an equal share of every mini-batch
(``shard_for_ranks``; with ``train.balance_ranks`` dealt for about equal tokens, every row
counting, since the value loss has no zero-advantage rows to skip: heron.parallel.rank_balance),
so the update is the single-process one in another summation order. value_mean and
explained_variance need the whole batch: they are computed here, on the driver, from the batch
the ranks were given. Checkpoints: every rank writes its
DCP shards of ``critic/`` collectively (rank 0 its ``state.json``); loading reshards to this
world size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from heron.checkpoint.shards import SavedShards, ShardRequest
from heron.cluster.rank_spec import RankSpec, join_group, rank_parallelize, wait_saved_on_ranks
from heron.cluster.remote_call import ActorRef, wait_all
from heron.critic.build import build_critic
from heron.critic.critic import batch_metrics
from heron.parallel.rank_balance import RankBalance
from heron.parallel.shard_batch import shard_for_ranks
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.trainer.batch import TrainBatch

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint


def build_critic_rank(spec: RankSpec, rank: int, master_addr: str, master_port: int):
    """Runs inside a critic actor: joins the critic ranks' process group, then builds the same
    critic as the local executor (``heron.critic.build``; ``spec.component`` is its
    ``CriticSpec``), made data-parallel from outside."""
    from heron.parallel.dp_critic import DataParallelCritic

    join_group(spec, rank, master_addr, master_port)
    return build_critic(spec.component, parallelize=rank_parallelize(spec), critic_cls=DataParallelCritic)


class CriticGroup(Resident):
    def __init__(self, ranks: list[ActorRef], steps_per_rollout: int, timeout_s: float, balance: RankBalance | None = None):
        self.ranks = ranks
        self.steps = steps_per_rollout
        self.timeout_s = timeout_s
        self.balance = balance  # None: contiguous shares

    @needs_device
    def values(self, batch: TrainBatch) -> torch.Tensor:
        """``Critic.values``: V_t [B, L-1] at the critic's current weights, each rank an equal share of rows."""
        shards = shard_for_ranks(batch, 1, len(self.ranks))
        parts = wait_all([(r, r.submit("values", s)) for r, s in zip(self.ranks, shards)], "values", self.timeout_s)
        return torch.cat(parts)  # [B, L-1], rows in the batch's order

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        shards = shard_for_ranks(batch, self.steps, len(self.ranks), self.balance)
        metrics = wait_all([(r, r.submit("train", s)) for r, s in zip(self.ranks, shards)], "train", self.timeout_s)
        return {**metrics[0], **batch_metrics(batch)}  # every rank returns the reduced step metrics

    @host_only
    def holdings(self) -> Holdings:
        """Nothing in this process: each rank actor declares its own (``Critic.holdings``)."""
        return Holdings()

    @needs_device
    def save_state(self, request: ShardRequest) -> SavedShards:
        """Every rank writes (or stages) its shards of ``critic/`` (a collective); rank 0's fingerprint."""
        return self._on_all_ranks("save_state", request)[0]

    @host_only
    def wait_saved(self) -> dict[str, str]:
        """Every rank's checksums once its shard write has finished (from host copies: no rank wakes)."""
        return wait_saved_on_ranks(self.ranks, self.timeout_s)

    @needs_device
    def load_state(self, checkpoint: Checkpoint) -> None:
        """Every rank checks the fit and loads collectively; DCP reshards to this world size."""
        self._on_all_ranks("load_state", checkpoint)

    def _on_all_ranks(self, method: str, *args) -> list:
        return wait_all([(r, r.submit(method, *args)) for r in self.ranks], method, self.timeout_s)
