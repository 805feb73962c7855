"""What a reward function may return (issue 9, items 2.8, 2.9, 3): real numbers only, one
per sample, within the deadline; anything else is a reward error (counted, or the run stops
under on_error=fail), never coerced. Eval's reward errors are counted apart from training's."""

import threading
from fractions import Fraction

import numpy as np
import pytest

from heron.config.reward import RewardConfig
from heron.records import Group, Prompt, RolloutBatch, Sample
from heron.reward.scorer import RewardError, RewardScorer


def _batch(group_sizes: list[int]) -> RolloutBatch:
    groups = []
    for pid, size in enumerate(group_sizes):
        samples = [
            Sample(rollout_id=2, prompt_id=pid, sample_index=i, policy_version=2, prompt_tokens=[1],
                   response_tokens=[2], response_logprobs=[0.0], loss_mask=[1], response_text=f"a{i}", finish_reason="stop")
            for i in range(size)
        ]
        groups.append(Group(prompt=Prompt(prompt_id=pid, text=f"q{pid}", label="a0"), samples=samples))
    return RolloutBatch(rollout_id=2, policy_version=2, groups=groups)


def _scorer(fn, scope="sample", **kw):
    return RewardScorer(fn, RewardConfig(fn="x:y", scope=scope, failure_value=-1.0, **kw), scope)


@pytest.mark.parametrize("value", ["1.0", "1", b"1", None, [1.0], (1.0,), {"reward": 1.0}, float("nan"), float("inf"), 1j])
def test_a_sample_reward_that_is_not_a_finite_real_number_is_a_reward_error(value):
    scorer = _scorer(lambda prompt, response: value)
    rewards = [s.reward for s in scorer.score(_batch([2])).samples]
    assert rewards == [-1.0, -1.0] and scorer.num_errors == 2
    with pytest.raises(RewardError, match="r2/p0/s0"):
        _scorer(lambda prompt, response: value, on_error="fail").score(_batch([1]))


@pytest.mark.parametrize("value,expected", [(True, 1.0), (0, 0.0), (2, 2.0), (0.5, 0.5), (np.float32(0.25), 0.25),
                                            (np.int64(3), 3.0), (Fraction(1, 4), 0.25)])
def test_real_numbers_are_rewards(value, expected):
    scorer = _scorer(lambda prompt, response: value)
    assert [s.reward for s in scorer.score(_batch([2])).samples] == [expected, expected]
    assert scorer.num_errors == 0
    assert all(type(s.reward) is float for s in scorer.score(_batch([1])).samples)


@pytest.mark.parametrize("value", ["10", "1", b"10", {0: 1.0, 1: 0.0}, {1.0, 0.0}, [1.0, "0"], [1.0], [1.0, 0.0, 1.0], 1.0, None])
def test_a_group_reward_must_be_one_real_number_per_sample(value):
    """``"10"`` used to be iterated character by character into [1.0, 0.0] and trained on."""
    scorer = _scorer(lambda prompt, responses: value, scope="group")
    rewards = [s.reward for s in scorer.score(_batch([2, 2])).samples]
    assert rewards == [-1.0] * 4 and scorer.num_errors == 4


@pytest.mark.parametrize("value", [[1.0, 0.0], (1, 0), np.array([1.0, 0.0]), [True, False]])
def test_a_group_reward_may_be_any_sequence_of_real_numbers(value):
    scorer = _scorer(lambda prompt, responses: value, scope="group")
    assert [s.reward for s in scorer.score(_batch([2])).samples] == [1.0, 0.0] and scorer.num_errors == 0


def test_a_batch_reward_of_the_wrong_type_fails_the_whole_batch():
    scorer = _scorer(lambda prompts, responses: "1111", scope="batch")
    assert [s.reward for s in scorer.score(_batch([2, 2])).samples] == [-1.0] * 4 and scorer.num_errors == 4


def test_eval_scoring_does_not_change_the_training_error_count():
    """``reward/num_errors`` is the training batch's count; eval reports its own."""
    fails_on = {"a1"}
    scorer = _scorer(lambda prompt, response: "bad" if response in fails_on else 1.0)
    scorer.score(_batch([3, 3]))  # a1 of both groups fails
    assert scorer.metrics() == {"reward/num_errors": 2.0}
    prompts = [Prompt(prompt_id=i, text="q", label="x") for i in range(3)]
    fails_on = {"a0", "a1", "a2"}
    scores = scorer.score_responses(prompts, ["a0", "a1", "a2"], ["eval/p0", "eval/p1", "eval/p2"])
    assert scores.rewards == [-1.0, -1.0, -1.0] and scores.num_errors == 3
    assert scorer.metrics() == {"reward/num_errors": 2.0}


@pytest.mark.parametrize("max_concurrency", [1, 3])
def test_a_hanging_reward_is_cut_off_at_the_deadline(max_concurrency):
    """The default deadline is finite (test_config_inputs); here a short one, so the test is quick.
    The hook blocks until the test releases it: no wall-clock bound, the event says it was cut off."""
    release = threading.Event()

    def hangs_on_a1(prompt, response):
        if response == "a1":
            release.wait(60)
            return 1.0
        return 0.5

    try:
        scorer = _scorer(hangs_on_a1, timeout_s=0.2, max_concurrency=max_concurrency)
        rewards = [s.reward for s in scorer.score(_batch([3])).samples]
        assert not release.is_set()  # the call was still blocked when scoring returned
        assert rewards == [0.5, -1.0, 0.5] and scorer.num_errors == 1
    finally:
        release.set()
