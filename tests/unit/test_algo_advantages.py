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
    assert {"grpo", "dr_grpo"} <= set(ADVANTAGE_ESTIMATORS)
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert ADVANTAGE_ESTIMATORS["grpo"](rewards)[0, 0].item() == pytest.approx(0.5 / math.sqrt(1 / 3), abs=1e-5)
    assert ADVANTAGE_ESTIMATORS["dr_grpo"](rewards)[0, 0].item() == pytest.approx(0.5)


def test_rejects_flat_rewards():
    with pytest.raises(ValueError, match="num_groups, group_size"):
        grpo_advantages(torch.tensor([1.0, 0.0]))


# --- RLOO (leave-one-out baseline) ---


def test_rloo_binary_group():
    # A_i = r_i - mean of the other three: 1 - 1/3 = 2/3, 0 - 2/3 = -2/3
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    expected = torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS["rloo"](rewards), expected)


def test_rloo_is_n_over_n_minus_one_times_centred():
    # [2, 4, 6]: baselines (4+6)/2 = 5, (2+6)/2 = 4, (2+4)/2 = 3 -> [-3, 0, 3] = 1.5 * [-2, 0, 2]
    rewards = torch.tensor([[2.0, 4.0, 6.0], [0.0, 1.0, 5.0]])
    # group 1: baselines 3, 2.5, 0.5 -> [-3, -1.5, 4.5]
    expected = torch.tensor([[-3.0, 0.0, 3.0], [-3.0, -1.5, 4.5]])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS["rloo"](rewards), expected)


def test_rloo_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="at least 2 samples per group"):
        ADVANTAGE_ESTIMATORS["rloo"](torch.tensor([[1.0], [0.0]]))


# --- REINFORCE++ (global batch normalisation) ---


def test_reinforce_plus_plus_normalises_over_the_whole_batch():
    # all four rewards [1, 0, 1, 1]: mean 0.75, unbiased var (3 * 0.0625 + 0.5625) / 3 = 0.25, std 0.5
    # A = (r - 0.75) / 0.5 = [0.5, -1.5, 0.5, 0.5]: the all-correct group gets +0.5 (a global baseline)
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    expected = torch.tensor([[0.5, -1.5], [0.5, 0.5]])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](rewards), expected, atol=1e-5, rtol=0)


def test_reinforce_plus_plus_allows_one_sample_per_prompt():
    # [1, 0, 0, 1] as four groups of one: mean 0.5, unbiased std sqrt(1/3) -> +-0.866025
    rewards = torch.tensor([[1.0], [0.0], [0.0], [1.0]])
    expected = torch.tensor([[0.866025], [-0.866025], [-0.866025], [0.866025]])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS["reinforce_plus_plus"](rewards), expected, atol=1e-5, rtol=0)


def test_reinforce_plus_plus_baseline_centres_per_group_then_scales_by_batch_std():
    # centred per group: [0.5, -0.5], [0, 0], [1, -1]; batch mean 0, unbiased var 2.5 / 5 = 0.5
    # A = c / sqrt(0.5) = c * 1.414214; the constant group stays exactly 0
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [3.0, 1.0]])
    out = ADVANTAGE_ESTIMATORS["reinforce_plus_plus_baseline"](rewards)
    expected = torch.tensor([[0.707107, -0.707107], [0.0, 0.0], [1.414214, -1.414214]])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert torch.equal(out[1], torch.zeros(2))


@pytest.mark.parametrize("name", ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_new_estimators_give_exact_zero_for_equal_rewards(name):
    rewards = torch.tensor([[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]])
    assert torch.equal(ADVANTAGE_ESTIMATORS[name](rewards), torch.zeros(2, 3))


def test_zero_variance_groups_under_a_group_baseline_are_zero_among_informative_ones():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.3, 0.3, 0.3]])
    for name in ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline"):
        out = ADVANTAGE_ESTIMATORS[name](rewards)
        assert torch.equal(out[0], torch.zeros(3)) and torch.equal(out[2], torch.zeros(3)), name
        assert out[1, 0] > 0 > out[1, 1], name


def test_catalog_names_every_estimator_and_which_need_groups():
    from heron.algo.catalog import ADVANTAGES
    from heron.config.algo import AlgoConfig
    import typing

    # gae is no [G, N] -> [G, N] estimator: the critic's advantage stage computes it (heron.critic)
    assert set(ADVANTAGES) == set(ADVANTAGE_ESTIMATORS) | {"gae"}
    assert set(typing.get_args(typing.get_type_hints(AlgoConfig)["advantage"])) == set(ADVANTAGES)
    assert [n for n, info in ADVANTAGES.items() if not info.needs_group] == ["reinforce_plus_plus", "gae"]
    assert [n for n, info in ADVANTAGES.items() if info.needs_critic] == ["gae"]
