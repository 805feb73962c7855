"""The train/engine logprob mismatch metrics: hand-worked numbers, and the trainer reports them."""

import torch

from heron.trainer.logprob_mismatch import combine_stats, mismatch_metrics, mismatch_stats


def test_mean_and_max_over_loss_tokens_only():
    engine = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, 0.0]])
    trainer = torch.tensor([[-1.5, -2.0, -2.0], [-0.25, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])  # the 8.0 gap is off the loss tokens
    # |diff| on loss tokens: 0.5, 0, 1, 0.25 -> mean 1.75 / 4, max 1
    metrics = mismatch_metrics(mismatch_stats(engine, trainer, mask))
    assert metrics == {"engine_logprob_abs_diff_mean": 1.75 / 4, "engine_logprob_abs_diff_max": 1.0}


def test_reduced_stats_over_ranks_give_the_global_values():
    """What the data-parallel trainer does: sum the sums and counts, max the maxes."""
    a = mismatch_stats(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2))  # 0, 1
    b = mismatch_stats(torch.tensor([[-3.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1))  # 2
    reduced = torch.cat([a[:2] + b[:2], torch.maximum(a[2:], b[2:])])
    assert mismatch_metrics(reduced) == {"engine_logprob_abs_diff_mean": 1.0, "engine_logprob_abs_diff_max": 2.0}


def test_no_loss_tokens_gives_zeros():
    metrics = mismatch_metrics(mismatch_stats(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3)))
    assert metrics == {"engine_logprob_abs_diff_mean": 0.0, "engine_logprob_abs_diff_max": 0.0}


def test_stats_of_micro_batches_combine_to_the_stats_of_the_whole():
    g = torch.Generator().manual_seed(0)
    engine, trainer = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    parts = [mismatch_stats(engine[i : i + 2], trainer[i : i + 2], mask[i : i + 2]) for i in (0, 2)]
    whole = mismatch_stats(engine, trainer, mask)
    combined = combine_stats(parts)
    assert torch.allclose(combined, whole, rtol=0, atol=1e-12) and combined[2] == whole[2]
