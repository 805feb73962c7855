"""Group-relative advantages, checked against hand-worked numbers."""

import math

import pytest
import torch

from heron.algo.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages

pytestmark = pytest.mark.portability  # float32 results against hand-worked numbers


def test_grpo_binary_group():
    # mean 0.5; unbiased var = 4 * 0.25 / 3 = 1/3; A = +-0.5 / sqrt(1/3) = +-0.866025
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    expected = torch.tensor([[0.866025, -0.866025, -0.866025, 0.866025]])
    torch.testing.assert_close(grpo_advantages(rewards), expected, atol=1e-5, rtol=0)


def test_grpo_groups_are_independent():
    # group 0: mean 4, unbiased std sqrt((4 + 0 + 4) / 2) = 2 -> [-1, 0, 1]
    # group 1: mean 1, unbiased std sqrt((1 + 0 + 1) / 2) = 1 -> [1, -1, 0]
    rewards = torch.tensor([[2.0, 4.0, 6.0], [2.0, 0.0, 1.0]])
    expected = torch.tensor([[-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])
    torch.testing.assert_close(grpo_advantages(rewards, eps=0.0), expected)


def test_dr_grpo_only_centers():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 4.0, 6.0, 4.0]])
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [-2.0, 0.0, 2.0, 0.0]])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS["dr_grpo"](rewards), expected)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_equal_rewards_give_exact_zero(name):
    # 0.1 is not representable, so the mean differs from 0.1 by round-off; still exactly 0.
    rewards = torch.tensor([[0.1, 0.1, 0.1], [3.0, 3.0, 3.0]])
    assert torch.equal(ADVANTAGE_ESTIMATORS[name](rewards), torch.zeros(2, 3))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_group_size_one_gives_zero_not_nan(name):
    rewards = torch.tensor([[5.0], [7.0]])
    assert torch.equal(ADVANTAGE_ESTIMATORS[name](rewards), torch.zeros(2, 1))


def test_registry_matches_std_normalize_flag():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo"}
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert ADVANTAGE_ESTIMATORS["grpo"](rewards)[0, 0].item() == pytest.approx(0.5 / math.sqrt(1 / 3), abs=1e-5)
    assert ADVANTAGE_ESTIMATORS["dr_grpo"](rewards)[0, 0].item() == pytest.approx(0.5)


def test_rejects_flat_rewards():
    with pytest.raises(ValueError, match="num_groups, group_size"):
        grpo_advantages(torch.tensor([1.0, 0.0]))
