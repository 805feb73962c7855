"""Each algorithm family learns: a short toy RL run from one shared SFT warm start raises the
reward (the task and the warm start are those of tests/e2e/test_toy_run.py: RL must find and
reinforce the bare answer format the exact-match reward demands).

Every run makes two optimizer steps per rollout, so the second step is off-policy and the
losses' ratio handling (token clip, sequence clip, clipped IS weight) is exercised, not just
a plain policy gradient at ratio 1. The DAPO run's ``reward/mean`` covers only the kept
(mixed) groups, so it is judged on ``dynamic_sampling/reward_mean_drawn``, the mean over every
sample drawn. The critic PPO run (``gae``) also checks that its value model learned: V starts at 0
and its mean ends near the reward level. Numbers measured on this machine are in the issue notes; the threshold is the
one of test_toy_run (last four rollouts' mean above the first rollout's + 0.2).
"""

from __future__ import annotations

import pytest

from heron.config.root import load_config
from heron.loop import train
from heron.sft import run_sft
from heron.toy.demo_assets import create_demo_assets

COMMON = [
    "sft.num_steps=300", "sft.batch_size=32", "rollout.num_rollouts=8", "rollout.batch_size=8",
    "rollout.samples_per_prompt=8", "rollout.max_new_tokens=4", "train.lr=5e-4", "train.micro_batch_size=32",
    "train.steps_per_rollout=2", "eval.interval=0", "tracking.progress=false", "tracking.summary=false",
    "tracking.plot=false",
]

FAMILIES = {
    "reinforce_plus_plus": ["algo.advantage=reinforce_plus_plus"],
    "reinforce_plus_plus_baseline": ["algo.advantage=reinforce_plus_plus_baseline"],
    "rloo": ["algo.advantage=rloo", "algo.kl_coef=0.01", "algo.kl_in_reward=true", "algo.kl_estimator=k1"],
    "gspo": ["algo.loss=gspo", "algo.loss_agg=seq-mean-token-mean", "algo.clip_low=3e-4", "algo.clip_high=4e-4"],
    "cispo": ["algo.loss=cispo", "algo.clip_low=1", "algo.clip_high=0.28"],
    "gae": ["algo.advantage=gae", "critic.lr=1e-3"],  # PPO with a learned critic
    "dapo": [
        "rollout.dynamic_sampling.enabled=true", "rollout.dynamic_sampling.max_rounds=3", "algo.clip_low=0.2",
        "algo.clip_high=0.28", "reward.overlong_buffer=1", "algo.off_policy.mode=tis",
    ],
}
FAST = {"reinforce_plus_plus", "rloo", "gspo", "cispo", "dapo", "gae"}


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """One SFT warm start shared by every family's run."""
    folder = tmp_path_factory.mktemp("algorithms")
    assets = create_demo_assets(folder / "assets", max_digits=1, num_train=60)
    data = [f"data.path={assets['train']}", f"sft.path={assets['sft']}"]
    sft_cfg = load_config(None, [f"run.dir={folder / 'sft'}", f"model.path={assets['model']}", *data, *COMMON])
    return {"model": run_sft(sft_cfg, progress=False), "data": data, "folder": folder}


@pytest.mark.parametrize(
    "family", [f if f in FAST else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES]
)
def test_family_raises_the_reward(warm_start, family):
    run_dir = warm_start["folder"] / family
    cfg = load_config(None, [f"run.dir={run_dir}", f"model.path={warm_start['model']}", *warm_start["data"], *COMMON, *FAMILIES[family]])
    records = train(cfg)
    key = "dynamic_sampling/reward_mean_drawn" if family == "dapo" else "reward/mean"
    rewards = [r[key] for r in records]
    print(family, "rewards", [round(r, 3) for r in rewards])
    assert sum(rewards[-4:]) / 4 > rewards[0] + 0.2, rewards
    if family == "gae":  # the critic learned the reward's level: its mean value left 0 towards the rewards
        assert records[-1]["critic/value_mean"] > 0.25 and all(r["critic/value_loss"] > 0 for r in records)
    if family == "dapo":
        assert all(r["dynamic_sampling/groups_drawn"] >= 8 for r in records)
        assert any(r["dynamic_sampling/rounds"] > 0 for r in records), "no group was ever dropped: the filter did not run"
        assert all(r["train/mismatch/truncated_fraction"] <= 1 for r in records)
