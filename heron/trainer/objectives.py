"""What the trainer minimises. An objective maps one micro-batch to (loss, metric sums).

Every term is a sum over the micro-batch's loss tokens divided by ``normalizer``, the loss
token count of the whole optimizer mini-batch, so accumulating gradients over micro-batches
gives exactly the mini-batch gradient and metric sums add up to mini-batch means.
"""

from __future__ import annotations

from typing import Protocol

import torch

from heron.algo.kl import kl_penalty
from heron.algo.masked import masked_sum
from heron.algo.policy_loss import POLICY_LOSSES, PolicyLossOutput
from heron.config.algo import AlgoConfig
from heron.trainer.batch import TrainBatch


class Objective(Protocol):
    needs_reference: bool

    def __call__(
        self,
        micro: TrainBatch,
        logprobs: torch.Tensor,  # [b, L-1]
        entropy: torch.Tensor,  # [b, L-1]
        ref_logprobs: torch.Tensor | None,  # [b, L-1]
        normalizer: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class PolicyObjective:
    """loss = policy_loss(ratio, A) + kl_coef * KL(pi || pi_ref), token-level aggregation."""

    def __init__(self, cfg: AlgoConfig, policy_loss=None):
        self.cfg = cfg
        self.policy_loss = policy_loss or POLICY_LOSSES[cfg.loss]  # policy_loss: the hooks.policy_loss hook
        self.needs_reference = cfg.kl_coef > 0

    def __call__(self, micro, logprobs, entropy, ref_logprobs, normalizer):
        out = self.policy_loss(
            logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask,
            clip_low=self.cfg.clip_low, clip_high=self.cfg.clip_high, normalizer=normalizer,
        )
        if not isinstance(out, PolicyLossOutput):
            raise TypeError(f"policy loss {self.policy_loss!r} returned {type(out).__name__}, expected PolicyLossOutput")
        loss = out.loss
        metrics = {
            "pg_loss": out.loss.detach(),
            "clip_fraction": out.clip_fraction,
            "policy_drift_kl": out.approx_kl,
            "entropy": masked_sum(entropy.detach(), micro.loss_mask) / normalizer,
        }
        if ref_logprobs is not None:
            kl = masked_sum(kl_penalty(logprobs, ref_logprobs, self.cfg.kl_estimator), micro.loss_mask) / normalizer
            loss = loss + self.cfg.kl_coef * kl
            metrics["kl"] = kl.detach()
        metrics["loss"] = loss.detach()
        return loss, metrics


class SFTObjective:
    """Token-level negative log-likelihood of the masked (answer) tokens."""

    needs_reference = False

    def __call__(self, micro, logprobs, entropy, ref_logprobs, normalizer):
        loss = -masked_sum(logprobs, micro.loss_mask) / normalizer
        return loss, {"loss": loss.detach(), "entropy": masked_sum(entropy.detach(), micro.loss_mask) / normalizer}
