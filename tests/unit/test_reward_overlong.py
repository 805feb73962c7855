"""DAPO's overlong reward shaping: R_length with L_max = 16, L_cache = 4."""

import pytest

from heron.config.reward import RewardConfig
from heron.records import Group, Prompt, RolloutBatch, Sample
from heron.reward.overlong import overlong_penalty
from heron.reward.scorer import RewardScorer


@pytest.mark.parametrize("length, expected", [(0, 0.0), (12, 0.0), (13, -0.25), (14, -0.5), (16, -1.0), (20, -1.0)])
def test_penalty_ramps_over_the_buffer(length, expected):
    # (L_max - L_cache - |y|) / L_cache = (12 - |y|) / 4 inside the buffer
    assert overlong_penalty(length, max_tokens=16, buffer=4) == pytest.approx(expected)


def test_factor_scales_and_zero_buffer_disables():
    assert overlong_penalty(14, 16, 4, factor=0.5) == pytest.approx(-0.25)
    assert overlong_penalty(16, 16, 0) == 0.0


def _batch(lengths):
    samples = [Sample(0, 0, i, 0, [1], [5] * n, [0.0] * n, [1] * n, "42", "stop") for i, n in enumerate(lengths)]
    return RolloutBatch(0, 0, [Group(Prompt(0, "q", "42"), samples)])


def test_scorer_shapes_training_rewards_but_not_eval_scores():
    scorer = RewardScorer.from_config(RewardConfig(overlong_buffer=4))
    scorer.max_response_tokens = 16
    batch = scorer.score(_batch([10, 14, 16]))
    assert [s.reward for s in batch.samples] == pytest.approx([1.0, 0.5, 0.0])  # exact_match 1 + penalty
    assert scorer.metrics()["reward/overlong_penalty_mean"] == pytest.approx(-0.5)
    assert scorer.score_responses([Prompt(0, "q", "42")], ["42"], ["e0"]).rewards == [1.0]


def test_scorer_without_shaping_is_unchanged():
    scorer = RewardScorer.from_name("exact_match")
    assert [s.reward for s in scorer.score(_batch([16])).samples] == [1.0]
    assert "reward/overlong_penalty_mean" not in scorer.metrics()
