"""GAE and the clipped value loss (for PPO with a critic), checked against hand-worked numbers."""

import pytest
import torch

from heron.algo.gae import gae_advantages
from heron.algo.value_loss import clipped_value_loss

REWARD = torch.tensor([[0.0, 0.0, 1.0]])  # outcome reward at the last token
VALUES = torch.tensor([[0.5, 0.6, 0.7]])
MASK = torch.ones(1, 3)


def test_gamma_lambda_one_is_return_minus_value():
    # deltas: 0.6 - 0.5 = 0.1, 0.7 - 0.6 = 0.1, 1 - 0.7 = 0.3; A = [0.5, 0.4, 0.3] = 1 - V
    adv, ret = gae_advantages(REWARD, VALUES, MASK, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.4, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]]))


def test_lambda_zero_is_the_td_error():
    adv, _ = gae_advantages(REWARD, VALUES, MASK, gamma=1.0, lam=0.0)
    torch.testing.assert_close(adv, torch.tensor([[0.1, 0.1, 0.3]]))


def test_discount():
    # gamma 0.5: deltas 0.3 - 0.5 = -0.2, 0.35 - 0.6 = -0.25, 0.3; A_1 = -0.25 + 0.5 * 0.3 = -0.1,
    # A_0 = -0.2 + 0.5 * -0.1 = -0.25 = 0.25 * 1 - 0.5 (discounted return minus V_0)
    adv, _ = gae_advantages(REWARD, VALUES, MASK, gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[-0.25, -0.1, 0.3]]))


def test_masked_tokens_are_skipped_not_stepped():
    # the middle token is tool output (mask 0, a wild value): A_0 = (0 + 0.7 - 0.5) + 0.3 = 0.5
    adv, ret = gae_advantages(REWARD, torch.tensor([[0.5, 9.9, 0.7]]), torch.tensor([[1.0, 0.0, 1.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.0, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0.0, 1.0]]))


def test_an_all_masked_row_is_zero():
    adv, ret = gae_advantages(torch.ones(1, 2), torch.ones(1, 2), torch.zeros(1, 2))
    assert torch.equal(adv, torch.zeros(1, 2)) and torch.equal(ret, torch.zeros(1, 2))


def test_clipped_value_loss_hand_values():
    # token 0: V 1.0, V_old 0.5, R 0.6: V_clip 0.7; errors 0.16 vs 0.01 -> 0.5 * 0.16 = 0.08, grad V - R = 0.4
    # token 1: V 0.9, V_old 0.5, R 1.5: V_clip 0.7; errors 0.36 vs 0.64 -> clipped: 0.32, no gradient
    values = torch.tensor([[1.0, 0.9]], requires_grad=True)
    out = clipped_value_loss(values, torch.tensor([[0.5, 0.5]]), torch.tensor([[0.6, 1.5]]), torch.ones(1, 2), clip=0.2)
    out.loss.backward()
    assert out.loss.item() == pytest.approx((0.08 + 0.32) / 2)
    torch.testing.assert_close(values.grad, torch.tensor([[0.2, 0.0]]))
    assert out.clip_fraction.item() == pytest.approx(0.5)


def test_rejects_bad_parameters():
    with pytest.raises(ValueError, match="gamma and lambda"):
        gae_advantages(REWARD, VALUES, MASK, gamma=1.5)
    with pytest.raises(ValueError, match="value clip"):
        clipped_value_loss(VALUES, VALUES, VALUES, MASK, clip=0.0)
