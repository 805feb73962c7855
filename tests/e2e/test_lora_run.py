"""End to end with LoRA on the toy task: SFT warm start, then RL that trains only rank-8 adapters
(``model.lora``) makes the reward go up, as full fine-tuning does in test_toy_run.py."""

import json

import pytest

from heron.config.root import load_config
from heron.loop import train
from heron.sft import run_sft
from heron.toy.demo_assets import create_demo_assets


@pytest.mark.slow
@pytest.mark.portability
def test_sft_then_lora_rl_raises_the_reward(tmp_path):
    assets = create_demo_assets(tmp_path / "assets", max_digits=1, num_train=60)
    common = [
        f"data.path={assets['train']}", f"eval.path={assets['test']}", f"sft.path={assets['sft']}",
        "sft.num_steps=300", "sft.batch_size=32", "rollout.num_rollouts=12", "rollout.batch_size=8",
        "rollout.samples_per_prompt=8", "rollout.max_new_tokens=4", "train.micro_batch_size=32",
        "eval.interval=12", "tracking.progress=false", "tracking.summary=false",
    ]
    sft_model = run_sft(load_config(None, [f"run.dir={tmp_path / 'sft'}", f"model.path={assets['model']}", *common]), progress=False)
    run_dir = tmp_path / "rl"
    lora = ["model.lora.enabled=true", "model.lora.rank=8", "model.lora.alpha=16", "train.lr=5e-3"]
    records = train(load_config(None, [f"run.dir={run_dir}", f"model.path={sft_model}", *common, *lora]))

    rewards = [r["reward/mean"] for r in records]
    print("rewards", rewards)
    # as in test_toy_run.py: a rollout's mean of 64 0/1 rewards has a standard error <= 0.0625, the
    # difference below <= 0.07, so 0.2 is > 2.8 standard errors of a run that learned nothing
    assert sum(rewards[-4:]) / 4 > rewards[0] + 0.2, rewards
    evals = [json.loads(line) for line in open(run_dir / "eval.jsonl")]
    assert [e["rollout_id"] for e in evals] == [-1, 11]
