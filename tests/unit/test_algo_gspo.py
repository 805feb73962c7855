"""GSPO's sequence-level ratio and clipping, checked against hand-worked numbers.

old_logprobs = 0 and logprobs = log(token ratio), so ratios are exact. Losses use
seq-mean-token-mean weights (1/|y_i| per token) and the normaliser B' = 2 sequences, which
makes the aggregate the paper's 1/G sum_i l_i.
"""

import math

import pytest
import torch

from heron.algo.gspo import gspo_loss
from heron.algo.loss_agg import token_weights


def _run(token_ratios, advantages, mask=None, **kw):
    logp = torch.log(torch.tensor(token_ratios)).requires_grad_()
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask)
    out = gspo_loss(logp, torch.zeros_like(logp), torch.tensor(advantages), token_weights(mask, "seq-mean-token-mean"),
                    clip_low=0.2, clip_high=0.2, normalizer=float((mask.sum(-1) > 0).sum()), **kw)
    out.loss.backward()
    return out, logp.grad


def test_sequence_ratio_is_the_geometric_mean_and_tokens_share_one_gradient():
    # seq 0: token ratios [1.1, 1.1] -> s = 1.1 (not 1.21); A = +1 -> l = -1.1
    # seq 1: token ratios [2, 0.5] -> s = exp((log 2 + log 0.5) / 2) = 1; A = -1 -> l = 1
    # loss = (-1.1 + 1) / 2 = -0.05
    # d loss / d logp_it = (1/2) * (-s_i A_i / |y_i|): seq 0 -> -0.275 per token, seq 1 -> 0.25 per
    # token: equal for both tokens although their own ratios are 2 and 0.5 (PPO would clip one of them)
    out, grad = _run([[1.1, 1.1], [2.0, 0.5]], [1.0, -1.0])
    assert out.loss.item() == pytest.approx(-0.05)
    torch.testing.assert_close(grad, torch.tensor([[-0.275, -0.275], [0.25, 0.25]]))
    assert out.clip_fraction.item() == 0.0
    assert out.ratio_mean.item() == pytest.approx((1.1 + 1.0) / 2)


def test_a_clipped_sequence_loses_its_whole_gradient():
    # seq 0: s = 1.5 > 1.2 with A = +1 -> clipped, l = -1.2, no gradient on any token
    # seq 1: s = exp((log 0.5 + log 0.5) / 2) = 0.5 < 0.8 with A = -1 -> clipped, l = 0.8
    # seq 2: s = 0.5 with A = +1 -> unclipped (pessimistic), l = -0.5, grad (1/3) * (-0.5 / 2) per token
    out, grad = _run([[1.5, 1.5], [0.5, 0.5], [0.5, 0.5]], [1.0, -1.0, 1.0])
    assert out.loss.item() == pytest.approx((-1.2 + 0.8 - 0.5) / 3)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [0.0, 0.0], [-1 / 12, -1 / 12]]))
    assert out.clip_fraction.item() == pytest.approx(2 / 3)


def test_length_normalisation_ignores_masked_tokens():
    # seq 0 has 3 policy tokens of ratio 1.1 and a pad holding nan: s = 1.1
    logp = torch.tensor([[math.log(1.1)] * 3 + [float("nan")]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = gspo_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), token_weights(mask, "seq-mean-token-mean"),
                    clip_low=0.2, clip_high=0.2, normalizer=1.0)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.1)
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.1 / 3] * 3 + [0.0]]))


def test_an_all_masked_row_contributes_nothing():
    out, grad = _run([[1.1, 1.1], [3.0, 3.0]], [1.0, 5.0], mask=[[1.0, 1.0], [0.0, 0.0]])
    assert out.loss.item() == pytest.approx(-1.1)
    assert torch.equal(grad[1], torch.zeros(2))


def test_needs_one_advantage_per_sequence():
    with pytest.raises(ValueError, match="one advantage per sequence"):
        gspo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))


def test_paper_default_clip_range_is_narrow():
    # s = 1.001 is outside GSPO's [1 - 3e-4, 1 + 4e-4]: clipped with the function's defaults
    logp = torch.full((1, 2), math.log(1.001))
    out = gspo_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    assert out.clip_fraction.item() == pytest.approx(1.0)
    assert out.loss.item() == pytest.approx(-(1 + 4e-4))
