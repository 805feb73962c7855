"""``DataParallelTrainer``: one rank of a data-parallel ``PolicyTrainer``.

Each rank trains on its share of every mini-batch. Equivalence with one process on the
whole mini-batch: the loss of rank r is ``sum_r(token terms) / (T / N)`` where T is the
global normaliser of the mini-batch (all-reduced; token-mean: its loss-token count, see
``heron.algo.loss_agg`` for the other aggregations) and N the world size. FSDP2 and DDP
average gradients over ranks, so the applied gradient is
``(1/N) * sum_r grad(sum_r / (T/N)) = grad(sum_all / T)`` -- exactly the single-process
token-level gradient. Metric sums follow the same algebra, so their rank mean is the
single-process value. Only float summation order differs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from heron.algo.loss_agg import LossNormalizer, normalizer
from heron.parallel.data_parallel import (
    all_reduce_mean, all_reduce_sum, any_rank, clip_grad_norm, full_state_dict, max_over_ranks, reshard,
)
from heron.residency import needs_device
from heron.residency.snapshot import host_snapshot_of
from heron.trainer.batch import TrainBatch
from heron.trainer.logprob_mismatch import mismatch_metrics
from heron.trainer.policy_trainer import PolicyTrainer


class DataParallelTrainer(PolicyTrainer):
    """A ``PolicyTrainer`` whose model was made data-parallel by ``apply_data_parallel``."""

    def _loss_normalizer(self, mini: TrainBatch) -> LossNormalizer:
        loss_sum, metric_sum = self.objective.denominators(mini.loss_mask)
        return normalizer(all_reduce_sum(loss_sum), all_reduce_sum(metric_sum), dist.get_world_size())

    def _token_count(self, batch: TrainBatch) -> float:
        return max(all_reduce_sum(batch.num_loss_tokens), 1.0) / dist.get_world_size()

    def _clip_grad_norm(self, max_norm: float) -> float:
        return clip_grad_norm(self.model, max_norm)

    def _micro_batch_count(self, count: int) -> int:
        """The largest rank's count of packed micro-batches: every forward/backward is a
        collective under FSDP2, so every rank runs as many (heron.trainer.packing)."""
        return max_over_ranks(count)

    def _sum_over_ranks(self, value: float) -> float:
        """Totals (``model_flops``) are all-reduced with SUM: every rank then holds the global
        value, which the metrics' rank mean leaves unchanged."""
        return all_reduce_sum(value)

    def _nonfinite_anywhere(self, here: bool) -> bool:
        """Every rank stops or skips the same step: the grad norm is global already, but a loss
        may be non-finite on one rank alone."""
        return any_rank(here)

    def _mismatch_metrics(self, stats: torch.Tensor) -> dict[str, float]:
        """Over all ranks' tokens: sums all-reduced with SUM, the max with MAX (every rank then
        holds the global values, which the metrics' rank mean leaves unchanged)."""
        sums, peak = stats[:2].clone(), stats[2:].clone()
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        return mismatch_metrics(torch.cat([sums, peak]))

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        """This rank's share of the rollout (``steps_per_rollout`` mini-batches, in order)."""
        return all_reduce_mean(super().train(batch))

    @torch.no_grad()
    def _logprobs(self, batch: TrainBatch, *, reference: bool = False, parts=None) -> torch.Tensor:
        """``PolicyTrainer._logprobs``, then the gathered weights freed (``reshard``): its forwards
        run without a backward, which under FSDP2 leaves the root unit gathered (of the policy, or
        of the reference; a LoRA reference is the policy itself)."""
        try:
            return super()._logprobs(batch, reference=reference, parts=parts)
        finally:
            reshard(self.model)
            if self.reference is not None:
                reshard(self.reference)

    def _holds_full_weights(self) -> bool:
        return dist.get_rank() == 0

    def _publish_weights(self) -> None:
        """The host snapshot ``weights()`` hands out: the full weights on rank 0, {} elsewhere.
        An all-gather, so it runs where every rank is anyway (end of ``train``, construction,
        checkpoint load) and ``weights()`` stays host-only: a colocated push never wakes a rank."""
        state = full_state_dict(self.model)  # collective; every rank must call
        self._host_weights = self._engine_view(host_snapshot_of(state)) if dist.get_rank() == 0 else {}
        self._host_weights_version = self.version
