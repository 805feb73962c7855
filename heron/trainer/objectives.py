"""What the trainer minimises. An objective maps one micro-batch to (loss, metric sums).

Every term is a weighted sum over the micro-batch's loss tokens divided by the normaliser of
the whole optimizer mini-batch (``heron.algo.loss_agg``), so accumulating gradients over
micro-batches gives exactly the mini-batch gradient and metric sums add up to mini-batch
means, under every ``algo.loss_agg``.
"""

from __future__ import annotations

from typing import Protocol

import torch

from heron.algo import loss_agg
from heron.algo.kl import kl_penalty, sequence_kl
from heron.algo.loss_agg import LossNormalizer
from heron.algo.losses import policy_loss_from_config
from heron.algo.masked import masked_sum
from heron.algo.off_policy import engine_mismatch_weights
from heron.algo.policy_loss import PolicyLossOutput
from heron.config.algo import AlgoConfig
from heron.trainer.batch import TrainBatch


class Objective(Protocol):
    needs_reference: bool  # the loss needs reference logprobs
    # engine_mismatch compares the trainer's old logprobs of the whole batch with the engine's
    # before the first loss, so they need their own forward (heron.trainer.old_logprobs)
    compares_with_engine: bool
    # a row whose advantages are all 0 adds exactly 0 to the loss and its gradient, so the trainer
    # may leave it out of the forward (heron.trainer.zero_advantage)
    zero_advantage_idle: bool
    # the loss differentiates the entropy (algo.entropy_coef > 0); else it is a metric, and the
    # training forward computes it without an autograd graph (heron.trainer.lm_head_chunks)
    entropy_in_loss: bool

    def denominators(self, loss_mask: torch.Tensor) -> tuple[float, float]:
        """(loss, metric) sums of one mini-batch share, before the all-reduce (heron.algo.loss_agg)."""

    def engine_mismatch(
        self, old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, loss_mask: torch.Tensor, normalizer: float
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """Per-token weights of the policy loss (None: no correction) and mismatch metrics
        (token sums / normalizer)."""

    def __call__(
        self,
        micro: TrainBatch,
        logprobs: torch.Tensor,  # [b, L-1]
        entropy: torch.Tensor,  # [b, L-1]
        ref_logprobs: torch.Tensor | None,  # [b, L-1]
        normalizer: LossNormalizer,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class PolicyObjective:
    """loss = policy_loss(ratio, A) [+ kl_coef * KL(pi || pi_ref)] [- entropy_coef * H], every
    term aggregated by ``algo.loss_agg``; the policy loss weighted by the mismatch correction."""

    def __init__(self, cfg: AlgoConfig, policy_loss=None, max_response_tokens: int = 0):
        self.cfg = cfg
        self.policy_loss = policy_loss or policy_loss_from_config(cfg)  # policy_loss: the hooks.policy_loss hook
        self.needs_reference = cfg.kl_coef > 0 and not cfg.kl_in_reward
        self.compares_with_engine = cfg.off_policy.mode != "none"
        # every built-in policy loss is linear in A; a KL or entropy term in the loss, or a hook, may not be
        self.zero_advantage_idle = policy_loss is None and not self.needs_reference and cfg.entropy_coef == 0
        self.entropy_in_loss = cfg.entropy_coef > 0
        self.max_response_tokens = max_response_tokens  # L of seq-mean-token-sum-norm (rollout.max_new_tokens)

    def denominators(self, loss_mask):
        return loss_agg.denominators(loss_mask, self.cfg.loss_agg, self.max_response_tokens)

    def engine_mismatch(self, old_logprobs, engine_logprobs, loss_mask, normalizer):
        c = self.cfg.off_policy
        if not self.compares_with_engine:
            return None, {}
        return engine_mismatch_weights(
            old_logprobs, engine_logprobs, loss_mask, mode=c.mode, tis_cap=c.tis_cap, mask_low=c.mask_low,
            mask_high=c.mask_high, normalizer=normalizer,
        )

    def reward_kl(self, logprobs, ref_logprobs, loss_mask) -> torch.Tensor:
        """sum_t KL_t per sequence [B], for algo.kl_in_reward."""
        return sequence_kl(logprobs, ref_logprobs, loss_mask, self.cfg.kl_estimator)

    def __call__(self, micro, logprobs, entropy, ref_logprobs, normalizer):
        weights = loss_agg.token_weights(micro.loss_mask, self.cfg.loss_agg)  # [b, L-1]
        pg_weights = weights if micro.mismatch_weights is None else weights * micro.mismatch_weights
        out = self.policy_loss(
            logprobs, micro.old_logprobs, micro.advantages, pg_weights,
            clip_low=self.cfg.clip_low, clip_high=self.cfg.clip_high, normalizer=normalizer.loss,
        )
        if not isinstance(out, PolicyLossOutput):
            raise TypeError(f"policy loss {self.policy_loss!r} returned {type(out).__name__}, expected PolicyLossOutput")
        loss = out.loss
        metrics = {
            "pg_loss": out.loss.detach(),
            "clip_fraction": normalizer.to_metric(out.clip_fraction),
            "policy_drift_kl": normalizer.to_metric(out.approx_kl),
            "entropy": masked_sum(entropy.detach(), weights) / normalizer.metric,
            **{name: normalizer.to_metric(value) for name, value in out.extra.items()},
        }
        if ref_logprobs is not None:
            kl = masked_sum(kl_penalty(logprobs, ref_logprobs, self.cfg.kl_estimator), weights) / normalizer.loss
            loss = loss + self.cfg.kl_coef * kl
            metrics["kl"] = normalizer.to_metric(kl.detach())
        if self.cfg.entropy_coef > 0:
            loss = loss - self.cfg.entropy_coef * masked_sum(entropy, weights) / normalizer.loss
        metrics["loss"] = loss.detach()
        return loss, metrics


class SFTObjective:
    """Token-level negative log-likelihood of the masked (answer) tokens."""

    needs_reference = False
    compares_with_engine = False
    zero_advantage_idle = False  # every answer token has a gradient
    entropy_in_loss = False  # a metric only

    def denominators(self, loss_mask):
        return loss_agg.denominators(loss_mask, "token-mean")

    def engine_mismatch(self, old_logprobs, engine_logprobs, loss_mask, normalizer):
        return None, {}

    def __call__(self, micro, logprobs, entropy, ref_logprobs, normalizer):
        loss = -masked_sum(logprobs, micro.loss_mask) / normalizer.loss
        return loss, {"loss": loss.detach(), "entropy": masked_sum(entropy.detach(), micro.loss_mask) / normalizer.metric}
