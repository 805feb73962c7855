"""Train/inference mismatch: how far the engine's logprobs are from the trainer's.

The engine samples with its own kernels (vLLM's fused attention and GEMMs, a different batch
layout), so even with identical weights its log p(token) differs from the trainer's recomputed
one by float round-off; a wrong weight push or a different sampling convention shows up as a
large gap. Over the loss tokens t of a rollout (mask m_t = 1):

    abs_diff_mean = sum_t m_t |lp_engine_t - lp_trainer_t| / sum_t m_t
    abs_diff_max  = max_{t: m_t = 1} |lp_engine_t - lp_trainer_t|

This is what an off-policy correction (importance weights exp(lp_trainer - lp_engine)) consumes.
"""

from __future__ import annotations

import torch


def mismatch_stats(engine: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """engine, trainer, mask [B, L-1] -> [3] float64: (sum |diff|, loss-token count, max |diff|)."""
    diff = (engine.double() - trainer.double()).abs() * mask  # [B, L-1]
    count = mask.double().sum()
    peak = diff.max() if diff.numel() else diff.new_zeros(())
    return torch.stack([diff.sum(), count, peak])  # [3]


def mismatch_metrics(stats: torch.Tensor) -> dict[str, float]:
    """The metrics of ``mismatch_stats`` (possibly reduced over ranks: sums summed, max maxed)."""
    total, count, peak = stats.tolist()
    return {"engine_logprob_abs_diff_mean": total / max(count, 1.0), "engine_logprob_abs_diff_max": peak}


def combine_stats(parts: list[torch.Tensor]) -> torch.Tensor:
    """The ``mismatch_stats`` of several micro-batches -> those of their union: sums added, max maxed."""
    stacked = torch.stack(parts)  # [k, 3]
    return torch.cat([stacked[:, :2].sum(0), stacked[:, 2:].max(0).values])  # [3]
