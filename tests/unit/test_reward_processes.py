"""reward.processes (heron.reward.process_pool): sync reward calls in worker processes. The same
rewards as in this process for the built-in math reward; failures isolated per call as with
threads (an exception, a call past its deadline, a worker that dies), the hung worker killed, not
abandoned; calls spread over the workers, which serve later batches until close()."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from heron.config.reward import RewardConfig
from heron.records import Prompt
from heron.reward.scorer import RewardScorer
from tests.tolerance import HANG_S
from tests.unit.test_reward_scorer import TIMEOUT_S

HOOK = '''
import os, time
from pathlib import Path

def reward(prompt, response):
    if response == "boom":
        raise ZeroDivisionError("bad sample")
    if response == "hang":
        Path(prompt.label).write_text(str(os.getpid()))  # the test checks this process is gone
        time.sleep({hang})
    if response == "die":
        os._exit(3)
    return float(os.getpid())

async def async_reward(prompt, response):
    return 1.0
'''


def _hook(tmp_path: Path) -> str:
    path = tmp_path / "rewards.py"
    path.write_text(HOOK.format(hang=HANG_S))
    return str(path)


def _score(scorer: RewardScorer, responses: list[str], label: str = "x") -> list[float]:
    prompts = [Prompt(prompt_id=i, text="q", label=label) for i in range(len(responses))]
    return scorer.score_responses(prompts, responses, [f"s{i}" for i in range(len(responses))]).rewards


def test_builtin_math_scores_the_same_in_processes():
    answers = ["\\boxed{\\frac{3}{4}}", "0.75", "\\boxed{3/4}", "\\boxed{7}", "no answer", "\\boxed{x^2}"]
    prompts = [Prompt(prompt_id=i, text="q", label="\\frac{3}{4}") for i in range(len(answers))]
    ids = [f"s{i}" for i in range(len(answers))]
    inline = RewardScorer.from_config(RewardConfig(fn="math")).score_responses(prompts, answers, ids)
    scorer = RewardScorer.from_config(RewardConfig(fn="math", processes=2))
    try:
        assert scorer.score_responses(prompts, answers, ids) == inline
        assert {1.0, 0.0} <= set(inline.rewards)
    finally:
        scorer.close()


def test_failures_cost_only_their_call_and_a_hung_worker_is_killed(tmp_path, caplog):
    # the deadline: a trivial call finishes well within it on a loaded machine (test_reward_scorer.py)
    cfg = RewardConfig(fn=_hook(tmp_path) + ":reward", processes=2, timeout_s=TIMEOUT_S, failure_value=-1.0)
    scorer = RewardScorer.from_config(cfg)
    pid_file = tmp_path / "hung.pid"
    try:
        with caplog.at_level(logging.WARNING, logger="heron.reward"):
            rewards = _score(scorer, ["a", "boom", "hang", "b", "die", "c"], label=str(pid_file))
        assert [r for k, r in enumerate(rewards) if k in (1, 2, 4)] == [-1.0, -1.0, -1.0]
        pids = {rewards[k] for k in (0, 3, 5)}
        assert all(pid > 0 and pid != os.getpid() for pid in pids)
        assert "s1: ZeroDivisionError: bad sample" in caplog.text
        assert f"s2: TimeoutError: reward call took longer than reward.timeout_s={TIMEOUT_S}" in caplog.text
        assert "s4: ChildProcessError: the reward worker died (exit code 3)" in caplog.text
        with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
            os.kill(int(pid_file.read_text()), 0)
        assert len(scorer._processes.workers) == 2  # both replaced, ready for the next batch
        assert set(_score(scorer, ["a", "b"])) == {float(w.process.pid) for w in scorer._processes.workers}
    finally:
        scorer.close()


def test_calls_spread_over_the_workers_which_serve_later_batches(tmp_path):
    scorer = RewardScorer.from_config(RewardConfig(fn=_hook(tmp_path) + ":reward", processes=2))
    try:
        first = set(_score(scorer, ["a"] * 6))
        assert len(first) == 2  # each worker took a call at once
        assert set(_score(scorer, ["a"] * 6)) == first  # the same two processes
        workers = list(scorer._processes.workers)
        scorer.close()
        assert all(w.process.poll() is not None for w in workers)
        assert set(_score(scorer, ["a"] * 2)).isdisjoint(first)  # fresh ones after close()
    finally:
        scorer.close()


def test_async_rewards_are_refused_in_processes(tmp_path):
    with pytest.raises(ValueError, match="reward.processes=2 runs sync reward functions.*set reward.processes=0"):
        RewardScorer.from_config(RewardConfig(fn=_hook(tmp_path) + ":async_reward", processes=2))
    with pytest.raises(ValueError, match="reward.processes must be >= 0"):
        RewardConfig(processes=-1)
