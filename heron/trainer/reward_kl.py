"""The KL-in-reward term (``algo.kl_in_reward``): per sample, kl_coef * sum_t KL_t between the
policy that generated it and the reference (``heron.algo.kl.sequence_kl``), computed by the
trainer (which holds the reference model) before the advantages are estimated."""

from __future__ import annotations

from heron.config.algo import AlgoConfig
from heron.records import RolloutBatch
from heron.trainer.batch import collate
from heron.trainer.protocol import Trainer


def reward_kl_penalties(trainer: Trainer, batch: RolloutBatch, pad_token_id: int, cfg: AlgoConfig) -> list[float] | None:
    """One penalty per sample in batch order, or None when the KL is not in the reward."""
    if not cfg.kl_in_reward:
        return None
    kl = trainer.sequence_kl(collate(batch.samples, pad_token_id))
    return [cfg.kl_coef * value for value in kl]
