"""Reward failures in real toy runs (issue 9, items 2.9 and 3): eval's reward errors no longer
overwrite the training count, and a reward hook that hangs is cut off at reward.timeout_s,
so the run goes on instead of hanging."""

from __future__ import annotations

import json

from heron.loop import train
from heron.plugins.loader import load_hook
from heron.toy.addition import make_prompts

HOOKS = '''
import threading

release = threading.Event()  # set by the test at the end, so abandoned calls finish


def fails_on_eval(prompt, response):
    if prompt.metadata.get("split") == "eval":
        raise ValueError("the eval reward server is down")
    return 1.0 if response.strip() == prompt.label else 0.0


def hangs(prompt, response):
    release.wait(120)
    return 1.0
'''


def test_eval_reward_errors_do_not_show_up_as_training_errors(run_config, tmp_path):
    hooks = tmp_path / "rewards.py"
    hooks.write_text(HOOKS)
    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_text("".join(
        json.dumps({"prompt": p.text, "label": p.label, "split": "eval"}) + "\n" for p in make_prompts(5, seed=3, max_digits=2)
    ))
    records = train(run_config(f"reward.fn={hooks}:fails_on_eval", f"eval.path={eval_set}", "eval.interval=1"))
    assert len(records) == 2
    for record in records:  # eval runs after every rollout here, and fails on all 5 prompts
        assert record["eval/reward_errors"] == 5.0
        assert record["reward/num_errors"] == 0.0


def test_a_hanging_reward_hook_is_cut_off_and_the_run_finishes(run_config, tmp_path):
    hooks = tmp_path / "rewards.py"
    hooks.write_text(HOOKS)
    spec = f"{hooks}:hangs"
    try:
        records = train(run_config(f"reward.fn={spec}", "reward.timeout_s=0.5"))
    finally:
        load_hook("reward", spec).__globals__["release"].set()
    assert [r["reward/num_errors"] for r in records] == [6.0, 6.0]  # 2 prompts x 3 samples, each cut off
    assert [r["reward/mean"] for r in records] == [0.0, 0.0]  # reward.failure_value
