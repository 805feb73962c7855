"""The advantages stage: one estimator call per rollout batch with rewards [G, N]."""

import pytest
import torch

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.algo.assign import assign_advantages
from heron.records import Group, Prompt, RolloutBatch, Sample


def _batch(rewards_per_group):
    groups = []
    for k, rewards in enumerate(rewards_per_group):
        samples = [Sample(0, k, i, 0, [1], [2], [0.0], [1], "x", "stop", reward=r) for i, r in enumerate(rewards)]
        groups.append(Group(Prompt(k, "q", "a"), samples))
    return RolloutBatch(0, 0, groups)


def test_the_estimator_sees_the_whole_batch_once():
    calls = []

    def spy(rewards):
        calls.append(rewards.clone())
        return rewards * 10

    batch = assign_advantages(_batch([[1.0, 0.0], [0.5, 2.0], [3.0, 3.0]]), spy)
    assert len(calls) == 1
    assert torch.equal(calls[0], torch.tensor([[1.0, 0.0], [0.5, 2.0], [3.0, 3.0]]))
    assert [s.advantage for s in batch.samples] == [10.0, 0.0, 5.0, 20.0, 30.0, 30.0]


def test_batch_normalised_estimator_uses_every_group():
    # REINFORCE++ over [1, 0, 1, 1]: mean 0.75, std 0.5 (see test_algo_advantages)
    batch = assign_advantages(_batch([[1.0, 0.0], [1.0, 1.0]]), ADVANTAGE_ESTIMATORS["reinforce_plus_plus"])
    assert [s.advantage for s in batch.samples] == pytest.approx([0.5, -1.5, 0.5, 0.5], abs=1e-5)


def test_groups_of_different_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="groups of equal size, but prompt 0 has 2 samples and prompt 1 3") as e:
        assign_advantages(_batch([[1.0, 0.0], [1.0, 0.0, 1.0]]), ADVANTAGE_ESTIMATORS["grpo"])
    assert "\n" not in str(e.value)


def test_reward_penalties_are_subtracted_before_the_estimator():
    # rewards [1, 1] minus KL penalties [0.5, 0.0] -> [0.5, 1.0]; dr_grpo: [-0.25, 0.25]
    batch = assign_advantages(_batch([[1.0, 1.0]]), ADVANTAGE_ESTIMATORS["dr_grpo"], reward_penalties=[0.5, 0.0])
    assert [s.advantage for s in batch.samples] == pytest.approx([-0.25, 0.25])
    assert [s.reward for s in batch.samples] == [1.0, 1.0]  # the task reward is kept


def test_non_finite_advantages_are_refused():
    with pytest.raises(ValueError, match="non-finite"):
        assign_advantages(_batch([[1.0, 0.0]]), lambda r: r / 0.0)
