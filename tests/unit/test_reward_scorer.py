"""Failure isolation in the reward stage: a reward call that raises, hangs or returns garbage
costs only the samples it covered (failure_value, counted, logged with the sample id) under
on_error=penalize, and stops the run naming the sample under on_error=fail. Sync and async
functions, per-sample, per-group and per-batch scopes."""

import asyncio
import logging
import threading

import pytest

from heron.config.reward import RewardConfig
from heron.records import Group, Prompt, RolloutBatch, Sample
from heron.reward.scorer import RewardError, RewardScorer
from tests.concurrency_probe import ConcurrencyProbe
from tests.tolerance import HANG_S

# The deadline of a reward call in these tests: a trivial call must finish well within it on a
# loaded machine (scheduling delays of ~10 runnable processes on 2 cores are ~0.25 s), and a
# hanging call costs the test this long.
TIMEOUT_S = 2.0
RELEASE = threading.Event()  # a "hang" call blocks until the test has its result and sets this


def _batch(responses_per_prompt: list[list[str]]) -> RolloutBatch:
    groups = []
    for pid, responses in enumerate(responses_per_prompt):
        samples = [
            Sample(rollout_id=4, prompt_id=pid, sample_index=i, policy_version=4, prompt_tokens=[1],
                   response_tokens=[2], response_logprobs=[0.0], loss_mask=[1], response_text=r, finish_reason="stop")
            for i, r in enumerate(responses)
        ]
        groups.append(Group(prompt=Prompt(prompt_id=pid, text=f"q{pid}", label="ok"), samples=samples))
    return RolloutBatch(rollout_id=4, policy_version=4, groups=groups)


def flaky(prompt, response):
    if response == "boom":
        raise ZeroDivisionError("bad sample")
    if response == "hang":
        RELEASE.wait(HANG_S)  # returns 1.0 (a wrong answer below) only if the scorer waited for it
        return 1.0
    if response == "nan":
        return float("nan")
    return 1.0 if response == prompt.label else 0.0


async def async_flaky(prompt, response):
    if response == "hang":
        await asyncio.sleep(HANG_S)  # cancelled by the scorer's timeout
        return 1.0
    if response == "boom":
        raise ZeroDivisionError("bad sample")
    return 1.0 if response == prompt.label else 0.0


@pytest.mark.portability
@pytest.mark.parametrize("fn", [flaky, async_flaky])
def test_penalize_isolates_failures_and_names_the_sample(fn, caplog):
    cfg = RewardConfig(fn="x:y", on_error="penalize", failure_value=-1.0, timeout_s=TIMEOUT_S, max_concurrency=4)
    batch = _batch([["ok", "boom", "no"], ["hang", "ok", "nan" if fn is flaky else "ok"]])
    scorer = RewardScorer(fn, cfg)
    RELEASE.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="heron.reward"):
            rewards = [s.reward for s in scorer.score(batch).samples]  # while the hanging call still hangs
    finally:
        RELEASE.set()
    expected_nan = -1.0 if fn is flaky else 1.0
    assert rewards == [1.0, -1.0, 0.0, -1.0, 1.0, expected_nan]
    scorer_errors = 3 if fn is flaky else 2
    assert "r4/p0/s1" in caplog.text and "ZeroDivisionError: bad sample" in caplog.text
    assert "r4/p1/s0" in caplog.text and "TimeoutError" in caplog.text
    assert scorer.metrics() == {"reward/num_errors": float(scorer_errors)}


def test_fail_mode_stops_with_the_sample_id():
    cfg = RewardConfig(fn="x:y", on_error="fail")
    with pytest.raises(RewardError, match=r"failed on sample r4/p0/s1: ZeroDivisionError: bad sample"):
        RewardScorer(flaky, cfg).score(_batch([["ok", "boom"]]))


def test_group_scope_gets_each_group_and_a_wrong_length_fails_only_that_group():
    calls = []

    def group_fn(prompt, responses):
        calls.append((prompt.prompt_id, list(responses)))
        return [1.0] * (len(responses) - (prompt.prompt_id == 1))

    cfg = RewardConfig(fn="x:y", scope="group", failure_value=-5.0)
    batch = RewardScorer(group_fn, cfg, scope="group").score(_batch([["a", "b"], ["c", "d"], ["e"]]))
    assert calls == [(0, ["a", "b"]), (1, ["c", "d"]), (2, ["e"])]
    assert [s.reward for s in batch.samples] == [1.0, 1.0, -5.0, -5.0, 1.0]


def test_batch_scope_is_one_call_over_all_samples():
    calls = []

    def batch_fn(prompts, responses):
        calls.append(([p.prompt_id for p in prompts], list(responses)))
        return [float(len(r)) for r in responses]

    batch = RewardScorer(batch_fn, RewardConfig(fn="x:y", scope="batch"), scope="batch").score(_batch([["a", "bb"], ["ccc"]]))
    assert calls == [([0, 0, 1], ["a", "bb", "ccc"])]
    assert [s.reward for s in batch.samples] == [1.0, 2.0, 3.0]


@pytest.mark.portability
def test_max_concurrency_bounds_calls_in_flight():
    probe = ConcurrencyProbe(expected=3, total=12)

    def slow(prompt, response):
        with probe:
            return 1.0

    RewardScorer(slow, RewardConfig(max_concurrency=3)).score(_batch([["a"] * 12]))
    assert not probe.timed_out, "fewer than 3 calls ever ran at once"
    assert probe.max_in_flight == 3


def test_builtin_and_unknown_names():
    batch = RewardScorer.from_name("math").score(_batch([["\\boxed{ok}", "\\boxed{7}"]]))
    assert [s.reward for s in batch.samples] == [1.0, 0.0]
    from heron.plugins.loader import HookError

    with pytest.raises(HookError, match="unknown reward.fn 'exactmatch'; built-ins:"):
        RewardScorer.from_name("exactmatch")
