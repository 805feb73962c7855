"""``DataParallelCritic``: one rank of a data-parallel ``Critic`` (the value model made
data-parallel by ``apply_data_parallel``, FSDP2 or DDP, on the critic ranks' own group).

The same algebra as ``DataParallelTrainer``: rank r's value loss of a mini-batch is
``sum_r(m_t l_t) / (T / N)``, T the mini-batch's loss-token count all-reduced over the N ranks;
FSDP2 and DDP average gradients, so the applied gradient is ``grad(sum_all(m_t l_t) / T)`` --
the single-process token-mean gradient, in another summation order. The rank mean of the
value loss and clip fraction is the single-process value for the same reason; the grad norm is
global on every rank. value_mean and explained_variance need the whole batch and are computed
where it is (``heron.cluster.critic_group``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from heron.critic.critic import Critic
from heron.parallel.data_parallel import all_reduce_mean, all_reduce_sum, any_rank, clip_grad_norm, max_over_ranks, reshard
from heron.residency import needs_device
from heron.trainer.batch import TrainBatch


class DataParallelCritic(Critic):
    def _loss_normalizer(self, mini: TrainBatch) -> float:
        return max(all_reduce_sum(mini.num_loss_tokens), 1.0) / dist.get_world_size()

    def _clip_grad_norm(self, max_norm: float) -> float:
        return clip_grad_norm(self.model, max_norm)

    def _nonfinite_anywhere(self, here: bool) -> bool:
        """Every rank skips (or stops at) the same step."""
        return any_rank(here)

    def _micro_batch_count(self, count: int) -> int:
        """The largest rank's count: under FSDP2 every forward is a collective."""
        return max_over_ranks(count)

    def _writes_shared_files(self) -> bool:
        return dist.get_rank() == 0

    @needs_device
    def values(self, batch: TrainBatch) -> torch.Tensor:
        """``Critic.values`` on this rank's rows, then the gathered weights freed (``reshard``):
        its forwards run without a backward, which under FSDP2 leaves the root unit gathered."""
        try:
            return super().values(batch)
        finally:
            reshard(self.model)

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        """This rank's share of the rollout; the step metrics, reduced over the ranks."""
        return all_reduce_mean(self._train_steps(batch))
