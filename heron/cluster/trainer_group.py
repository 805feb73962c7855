"""``TrainerGroup``: the driver's stand-in for ``train.world_size`` trainer rank actors,
with the verbs the run uses on a ``PolicyTrainer`` (``train``, ``weights``, ``version``).

``train`` gives each rank its share of every mini-batch (``shard_for_ranks``) and runs all
ranks concurrently; the ranks form a torch.distributed group and return already-reduced
metrics. ``weights`` returns rank 0's full weights (all-gathered at the end of ``train``), as
numpy arrays (object-store transport) or as a versioned safetensors file (disk transport).

Operations are declared like ``PolicyTrainer``'s: ``@needs_device`` ones wake every rank
through its residency proxy (the coordinator sleeps colocated engines first);
``weights`` is ``@host_only``: each rank serves the host snapshot taken at the end of
``train`` (``DataParallelTrainer._publish_weights``), so a push never wakes a rank.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from heron.cluster.remote_call import ActorRef, PendingBroadcast, wait_all
from heron.parallel.shard_batch import shard_for_ranks
from heron.residency import Resident, host_only, needs_device
from heron.trainer.batch import TrainBatch

if TYPE_CHECKING:
    from heron.config.root import HeronConfig


def build_trainer_rank(cfg: "HeronConfig", rank: int, world_size: int, master_addr: str, master_port: int):
    """Runs inside a trainer actor: joins the process group, then builds the same
    ``PolicyTrainer`` as the local executor, made data-parallel from outside."""
    from heron.components import build_policy_trainer
    from heron.parallel.data_parallel import apply_data_parallel, init_process_group
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.plugins.run_hooks import load_run_hooks

    init_process_group(
        rank, world_size, master_addr, master_port,
        device=cfg.cluster.device, timeout_s=cfg.cluster.collective_timeout_s,
    )
    torch.manual_seed(cfg.run.seed)
    return build_policy_trainer(
        cfg, load_run_hooks(cfg).policy_loss,
        parallelize=partial(apply_data_parallel, kind=cfg.train.parallel), trainer_cls=DataParallelTrainer,
    )


class TrainerGroup(Resident):
    def __init__(self, ranks: list[ActorRef], cfg: "HeronConfig", weight_dir: str):
        self.ranks = ranks
        self.steps = cfg.train.steps_per_rollout
        self.transport = cfg.cluster.weight_transport
        self.weight_dir = weight_dir
        self.timeout_s = cfg.cluster.call_timeout_s
        self.version = 0  # policy version, as PolicyTrainer.version: train() calls applied

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        shards = shard_for_ranks(batch, self.steps, len(self.ranks))
        metrics = wait_all([(r, r.submit("train", s)) for r, s in zip(self.ranks, shards)], "train", self.timeout_s)
        self.version += 1
        return metrics[0]

    @needs_device
    def sequence_kl(self, batch: TrainBatch) -> list[float]:
        """``PolicyTrainer.sequence_kl`` of every row: each rank computes an equal share of rows."""
        shards = shard_for_ranks(batch, 1, len(self.ranks))
        parts = wait_all([(r, r.submit("sequence_kl", s)) for r, s in zip(self.ranks, shards)], "sequence_kl", self.timeout_s)
        return [value for part in parts for value in part]

    @host_only
    def weights(self):
        """Rank 0's full weights: a numpy state dict, a ``WeightFile`` (disk transport), or a
        ``PendingBroadcast`` that the engines complete by receiving (broadcast transport)."""
        rank0 = self.ranks[0]  # holds the full host snapshot; the other ranks hold {}
        if self.transport == "broadcast":  # rank 0 sends once the engines receive: do not wait here
            return PendingBroadcast([(rank0, rank0.submit_host("send_weights", self.version))], self.version)
        if self.transport == "disk":
            pending = rank0.submit_host("call_to_file", "weights", self.weight_dir, self.version)
        else:
            pending = rank0.submit("weights")
        return wait_all([(rank0, pending)], "weights", self.timeout_s)[0]

    @host_only
    def gather_weights(self) -> dict:
        """Rank 0's full weights as numpy arrays, whatever the transport (tests, export)."""
        return wait_all([(self.ranks[0], self.ranks[0].submit("weights"))], "weights", self.timeout_s)[0]

    @needs_device
    def apply_all(self, fn, *args) -> list:
        """Runs ``fn(rank_trainer, *args)`` on every rank concurrently (collectives such as a
        DCP save or load need all ranks)."""
        name = getattr(fn, "__name__", "apply")
        return wait_all([(r, r.submit_host("apply", fn, *args)) for r in self.ranks], name, self.timeout_s)

    # --- run checkpoints (heron.checkpoint): the same two verbs as PolicyTrainer ---
    @needs_device
    def save_checkpoint(self, writer, rollout_id: int, run_state: dict) -> None:
        """Every rank writes its DCP shards into the writer's temporary folder; the writer
        (in this process) adds the state file and manifest and commits."""
        from heron.cluster.rank_checkpoint import save_rank_shards

        def write_shards(temp: Path):
            results = self.apply_all(save_rank_shards, str(Path(temp).resolve()))
            checksums = {k: v for _, rank_sums, _ in results for k, v in rank_sums.items()}
            fingerprint, _, trainer_state = results[0]
            run_state["trainer"] = trainer_state
            return fingerprint, checksums

        writer.save_sharded(rollout_id, run_state, write_shards)

    @needs_device
    def load_checkpoint(self, checkpoint, run_config: dict) -> None:
        from heron.cluster.rank_checkpoint import load_rank_checkpoint

        self.version = self.apply_all(load_rank_checkpoint, checkpoint, run_config)[0]

    @needs_device
    def save_state(self, folder: str) -> None:
        """Model + optimizer as DCP shards (every rank writes its own), loadable at any world size."""
        from heron.parallel.train_state import save_train_state

        self.apply_all(save_train_state, folder)

    @needs_device
    def load_state(self, folder: str) -> int:
        from heron.parallel.train_state import load_train_state

        self.version = self.apply_all(load_train_state, folder)[0]
        return self.version
