"""``TrainerGroup``: the driver's stand-in for ``train.world_size`` trainer rank actors,
with the verbs the run uses on a ``PolicyTrainer`` (``train``, ``weights``, ``version``).

``train`` gives each rank its share of every mini-batch (``rank_rows``; with
``train.balance_ranks`` rows dealt for about equal work, heron.parallel.rank_balance) and runs all
ranks concurrently; the ranks form a torch.distributed group and return already-reduced
metrics, to which it adds ``rank_work_imbalance`` (the largest rank's work over the mean).
``weights`` returns rank 0's full weights (all-gathered at the end of ``train``), as numpy
arrays (object-store transport) or as a versioned safetensors file (disk transport).

Operations are declared like ``PolicyTrainer``'s: ``@needs_device`` ones wake every rank
through its residency proxy (the coordinator sleeps colocated engines first);
``weights`` is ``@host_only``: each rank serves the host snapshot taken at the end of
``train`` (``DataParallelTrainer._publish_weights``), so a push never wakes a rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from heron.checkpoint.run_state import TrainerState
from heron.checkpoint.shards import SavedShards, ShardRequest
from heron.cluster.rank_spec import RankSpec, join_group, rank_parallelize, wait_saved_on_ranks
from heron.cluster.remote_call import ActorRef, wait_all
from heron.parallel.rank_balance import RankBalance, imbalance
from heron.parallel.shard_batch import rank_rows, shard_for_ranks, shards_of
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.trainer.batch import TrainBatch
from heron.trainer.build import build_trainer
from heron.weights.handle import WeightHandle
from heron.weights.transport import WeightTransport
from heron.weights.wire import from_wire

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint


def build_trainer_rank(spec: RankSpec, rank: int, master_addr: str, master_port: int):
    """Runs inside a trainer actor: joins the process group, then builds the same trainer as
    the local executor (``heron.trainer.build``; ``spec.component`` is its ``TrainerSpec``),
    made data-parallel from outside."""
    from heron.parallel.dp_trainer import DataParallelTrainer

    join_group(spec, rank, master_addr, master_port)
    torch.manual_seed(spec.component.seed)
    return build_trainer(
        spec.component, parallelize=rank_parallelize(spec), trainer_cls=DataParallelTrainer,
    )


class TrainerGroup(Resident):
    def __init__(self, ranks: list[ActorRef], steps_per_rollout: int, transport: WeightTransport, timeout_s: float,
                 balance: RankBalance):
        self.ranks = ranks
        self.steps = steps_per_rollout
        self.transport = transport
        self.timeout_s = timeout_s
        self.balance = balance
        self.version = 0  # policy version, as PolicyTrainer.version: train() calls applied

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        rows = rank_rows(batch, self.steps, len(self.ranks), self.balance)
        metrics = wait_all([(r, r.submit("train", s)) for r, s in zip(self.ranks, shards_of(batch, rows))], "train",
                           self.timeout_s)
        self.version += 1
        return {**metrics[0], "rank_work_imbalance": imbalance(rows, self.balance.work(batch))}

    @needs_device
    def sequence_kl(self, batch: TrainBatch) -> list[float]:
        """``PolicyTrainer.sequence_kl`` of every row: each rank computes an equal share of rows."""
        shards = shard_for_ranks(batch, 1, len(self.ranks))
        parts = wait_all([(r, r.submit("sequence_kl", s)) for r, s in zip(self.ranks, shards)], "sequence_kl", self.timeout_s)
        return [value for part in parts for value in part]

    @host_only
    def weights(self) -> WeightHandle:
        """Rank 0's full weights of the current version, by ``cluster.weight_transport``
        (``heron.weights.transport``); rank 0 serves its host snapshot, so no rank wakes."""
        return self.transport.publish(self.ranks[0], self.version)

    @host_only
    def host_weights(self) -> dict[str, torch.Tensor]:
        """Rank 0's full weights as host tensors, whatever the transport (tests, export)."""
        return from_wire(wait_all([(self.ranks[0], self.ranks[0].submit("host_weights"))], "host_weights", self.timeout_s)[0])

    @host_only
    def holdings(self) -> Holdings:
        """Nothing in this process: each rank actor declares its own holdings, and the group's
        residency is the set of their driver-side proxies (``heron.cluster.remote_residency``)."""
        return Holdings()

    # --- checkpoints (heron.checkpoint): every rank runs the same PolicyTrainer.save_state ---
    @needs_device
    def save_state(self, request: ShardRequest) -> SavedShards:
        """Every rank writes (or stages) its DCP shards into the request's folder concurrently
        (a collective); returns rank 0's fingerprint and trainer state (global values)."""
        return self._on_all_ranks("save_state", request)[0]

    @host_only
    def wait_saved(self) -> dict[str, str]:
        """Every rank's checksums, once its shard write has finished (async saves write from
        host copies: no rank wakes)."""
        return wait_saved_on_ranks(self.ranks, self.timeout_s)

    @needs_device
    def load_state(self, checkpoint: Checkpoint, run_config: dict) -> TrainerState:
        """Every rank checks the fit and loads collectively; DCP reshards to this world size."""
        state = self._on_all_ranks("load_state", checkpoint, run_config)[0]
        self.version = state.version
        return state

    def _on_all_ranks(self, method: str, *args) -> list:
        return wait_all([(r, r.submit(method, *args)) for r in self.ranks], method, self.timeout_s)
