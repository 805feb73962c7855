"""Features built apart, run together: each case is a real two-rollout run of the toy model with
checkpoints, under a reward the random model varies on (so advantages, values and updates are
non-zero). Every record must be complete and finite, and the last checkpoint must be committed.

Why this exists: features merged from separate branches met here for the first time, and one pair
(token-level GAE advantages under packed micro-batches) crashed mid-run with a shape mismatch
that neither branch's tests could see. One row per pairing users are likely to combine."""

from __future__ import annotations

import math

import pytest

from heron.checkpoint.layout import committed
from heron.config.root import load_config
from heron.loop import train
from heron.reward.builtin import BUILTIN_REWARDS
from tests.toy_run import toy_run_overrides

LORA = ["model.lora.enabled=true", "model.lora.rank=4"]
PACK = "train.max_tokens_per_micro_batch=24"
CASES = {
    "gae+checkpointing+bf16": ["algo.advantage=gae", "train.gradient_checkpointing=true", "train.precision=bf16", "run.allow_emulated_bf16=true"],
    "gae+packing+2steps+chunks": ["algo.advantage=gae", PACK, "train.steps_per_rollout=2", "train.logprob_chunk_size=3"],
    "gae+lora+colocate+kl_in_reward": [*LORA, "algo.advantage=gae", "colocate=true", "algo.kl_coef=0.1",
                                       "algo.kl_in_reward=true", "algo.kl_estimator=k1"],
    "lora+packing+kl+checkpointing": [*LORA, PACK, "algo.kl_coef=0.1", "train.gradient_checkpointing=true"],
    "lora+bf16+chunks+colocate": [*LORA, "train.precision=bf16", "train.logprob_chunk_size=3", "colocate=true", "run.allow_emulated_bf16=true"],
    "packing+tis+2steps": [PACK, "algo.off_policy.mode=tis", "train.steps_per_rollout=2"],
    "packing+mis+gspo": [PACK, "algo.off_policy.mode=mis", "algo.loss=gspo", "algo.loss_agg=seq-mean-token-mean"],
    "dynamic_sampling+gae": ["rollout.dynamic_sampling.enabled=true", "algo.advantage=gae"],
    "cispo+checkpointing+colocate": ["algo.loss=cispo", "train.gradient_checkpointing=true", "colocate=true"],
    "bf16engine+lora+colocate+tis": [*LORA, "engine.embedded.dtype=bfloat16", "train.precision=bf16", "colocate=true", "run.allow_emulated_bf16=true",
                                     "algo.off_policy.mode=tis"],
}


def _length_reward(prompt, response: str) -> float:
    return len(response.strip()) / 4.0


@pytest.mark.parametrize("overrides", list(CASES.values()), ids=list(CASES))
def test_features_run_together(toy_model_dir, toy_data_path, tmp_path, monkeypatch, overrides):
    monkeypatch.setitem(BUILTIN_REWARDS, "combo_length", _length_reward)
    cfg = load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, tmp_path, "reward.fn=combo_length", "rollout.num_rollouts=2",
        "rollout.batch_size=4", "checkpoint.interval=1", *overrides,
    ))
    records = train(cfg)
    assert [r["rollout_id"] for r in records] == [0, 1]
    numbers = {k: v for r in records for k, v in r.items() if isinstance(v, float) and not k.startswith("critic/explained")}
    assert [k for k, v in numbers.items() if not math.isfinite(v)] == []
    assert records[0]["train/grad_norm"] > 0  # the rewards varied, so something was learned from
    assert committed(tmp_path / "checkpoints")[0].name == "rollout-000001"
