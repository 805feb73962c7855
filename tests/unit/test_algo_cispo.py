"""CISPO's clipped stop-gradient IS weight, checked against hand-worked numbers and against
the gradient of the paper's own form, -sg(clip(r)) * A * log pi."""

import math

import pytest
import torch

from heron.algo.cispo import cispo_loss
from heron.algo.policy_loss import ppo_clip_loss

RATIOS = [[1.5, 0.5, 0.5, 1.1]]
ADV = [[1.0, -1.0, 1.0, -1.0]]


def _logp():
    return torch.log(torch.tensor(RATIOS)).requires_grad_()


def test_every_token_keeps_a_gradient_scaled_by_the_clipped_weight():
    # clip_low = 1 (no lower bound), clip_high = 0.2; weights ^r = [1.2, 0.5, 0.5, 1.1]
    # value l_t = -^r A: [-1.2, 0.5, -0.5, 1.1] -> mean -0.025; grad -^r A / 4 = [-0.3, 0.125, -0.125, 0.275]
    logp = _logp()
    out = cispo_loss(logp, torch.zeros(1, 4), torch.tensor(ADV), torch.ones(1, 4), clip_low=1.0, clip_high=0.2)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.025)
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.3, 0.125, -0.125, 0.275]]))
    assert out.clip_fraction.item() == pytest.approx(0.25)  # only the 1.5 was clipped
    # PPO drops the gradient of tokens 0 and 1 (clipped); CISPO keeps all four
    ppo_logp = _logp()
    ppo_clip_loss(ppo_logp, torch.zeros(1, 4), torch.tensor(ADV), torch.ones(1, 4)).loss.backward()
    assert (ppo_logp.grad == 0).sum() == 2 and (logp.grad != 0).all()


def test_gradient_equals_the_papers_form():
    logp = _logp()
    out = cispo_loss(logp, torch.zeros(1, 4), torch.tensor(ADV), torch.ones(1, 4), clip_low=0.3, clip_high=0.2)
    out.loss.backward()
    paper_logp = _logp()
    weight = paper_logp.detach().exp().clamp(0.7, 1.2)
    (-(weight * torch.tensor(ADV) * paper_logp).sum() / 4).backward()
    torch.testing.assert_close(logp.grad, paper_logp.grad)


def test_ratio_one_gives_minus_mean_advantage_and_masks_apply():
    logp = torch.tensor([[-1.0, -2.0, float("nan")]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = cispo_loss(logp, logp.detach().nan_to_num(), torch.tensor([[3.0, -1.0, 7.0]]), mask)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.0)  # -(3 - 1) / 2
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.5, 0.5, 0.0]]))


def test_extreme_ratios_stay_finite():
    logp = torch.tensor([[30.0, -30.0]], requires_grad=True)
    out = cispo_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), clip_low=1.0, clip_high=0.2)
    out.loss.backward()
    # ratios clamp to e^20 and e^-20; weights 1.2 and e^-20 (no lower bound)
    assert out.loss.item() == pytest.approx(-(1.2 + math.exp(-20)) / 2)
    assert torch.isfinite(logp.grad).all()
