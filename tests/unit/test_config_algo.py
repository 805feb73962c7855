"""Invalid algorithm combinations fail at config time with one line naming the fix."""

import pytest

from heron.config import ConfigError, load_config

BASE = ["model.path=m", "data.path=d.jsonl"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo.loss=gspo"], "algo.loss=gspo is a sequence-level objective (1/G sum_i l_i): set algo.loss_agg=seq-mean-token-mean"),
        (["algo.loss=gspo", "algo.loss_agg=seq-mean-token-mean", "hooks.policy_loss=my.py:loss"],
         "hooks.policy_loss replaces algo.loss, so algo.loss=gspo would be ignored"),
        (["rollout.samples_per_prompt=1", "algo.advantage=rloo"],
         "algo.advantage=rloo compares each answer with the others of its prompt, so rollout.samples_per_prompt=1 gives every advantage 0"),
        (["rollout.samples_per_prompt=1", "algo.advantage=reinforce_plus_plus_baseline"],
         "algo.advantage=reinforce_plus_plus_baseline compares each answer with the others of its prompt"),
        (["rollout.samples_per_prompt=1"], "algo.advantage=grpo compares each answer with the others of its prompt"),
        (["rollout.dynamic_sampling.enabled=true", "rollout.dynamic_sampling.max_rounds=0"],
         "rollout.dynamic_sampling.max_rounds must be >= 1 when dynamic sampling is enabled, got 0"),
        (["algo.kl_in_reward=true"], "algo.kl_in_reward needs algo.kl_coef > 0"),
        (["algo.off_policy.mode=tis", "train.recompute_old_logprobs=false"], "it needs train.recompute_old_logprobs=true"),
        (["algo.off_policy.tis_cap=1"], "algo.off_policy.tis_cap must be > 1, got 1.0"),
        (["algo.off_policy.mask_low=1.5"], "algo.off_policy needs 0 <= mask_low < 1 < mask_high"),
        (["algo.clip_ratio_c=1"], "algo.clip_ratio_c must be 0 (off) or > 1, got 1.0"),
        (["algo.clip_ratio_c=3", "algo.loss=cispo"], "algo.clip_ratio_c (dual-clip) applies to algo.loss=ppo_clip only"),
        (["algo.clip_low=1"], "algo.clip_low must be in [0, 1) (cispo: [0, 1]), got 1.0"),
        (["algo.entropy_coef=-1"], "algo.entropy_coef must be >= 0"),
        (["algo.kl_estimator=k4"], "config key 'algo.kl_estimator' must be one of ['k1', 'k2', 'k3']"),
        (["algo.loss_agg=sum"], "config key 'algo.loss_agg' must be one of"),
        (["reward.overlong_buffer=16"], "reward.overlong_buffer=16 must be < rollout.max_new_tokens=16"),
        (["rollout.dynamic_sampling.enabled=true", "loop.mode=async", "cluster.backend=ray"],
         "rollout.dynamic_sampling needs loop.mode=sync"),
        # PPO with a learned critic
        (["critic.lr=1e-3"], "the critic section trains a value model, but algo.advantage=grpo does not use one"),
        (["algo.advantage=rloo", "critic.value_clip=0.5"], "but algo.advantage=rloo does not use one; set algo.advantage=gae"),
        (["algo.advantage=gae", "hooks.advantage=my.py:adv"], "hooks.advantage replaces the advantage estimator, but algo.advantage=gae"),
        (["algo.advantage=gae", "hooks.policy_loss=my.py:loss"], "hooks.policy_loss gets one advantage per sequence"),
        (["algo.advantage=gae", "algo.loss=gspo", "algo.loss_agg=seq-mean-token-mean"], "algo.advantage=gae gives one advantage per token, but algo.loss=gspo"),
        (["algo.advantage=gae", "critic.value_clip=0"], "critic.value_clip must be > 0"),
        (["algo.advantage=gae", "critic.lr=0"], "critic.lr must be > 0"),
        (["algo.advantage=gae", "algo.gamma=1.5"], "algo.gamma must be in [0, 1], got 1.5"),
        (["algo.advantage=gae", "algo.lam=-0.1"], "algo.lam must be in [0, 1], got -0.1"),
    ],
)
def test_invalid_combinations_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*BASE, *overrides])
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["rollout.samples_per_prompt=1", "algo.advantage=reinforce_plus_plus"],
        ["rollout.samples_per_prompt=1", "hooks.advantage=my.py:adv"],  # a hook decides for itself
        ["algo.loss=gspo", "algo.loss_agg=seq-mean-token-mean", "algo.clip_low=3e-4", "algo.clip_high=4e-4"],
        ["algo.loss=cispo", "algo.clip_low=1", "algo.clip_high=0.28"],
        ["algo.kl_coef=0.01", "algo.kl_in_reward=true", "algo.kl_estimator=k1"],
        ["algo.off_policy.mode=mis", "algo.clip_ratio_c=3", "algo.loss_agg=seq-mean-token-sum-norm"],
        ["rollout.dynamic_sampling.enabled=true", "reward.overlong_buffer=4", "algo.entropy_coef=0.001"],
        # a critic needs no groups: one sample per prompt is fine
        ["algo.advantage=gae", "rollout.samples_per_prompt=1", "critic.lr=1e-3", "critic.path=other", "algo.lam=0.95"],
        ["algo.advantage=gae", "algo.loss=cispo", "algo.clip_low=1", "algo.kl_coef=0.01", "algo.kl_in_reward=true"],
    ],
)
def test_valid_combinations(overrides):
    load_config(None, [*BASE, *overrides])


def test_heron_config_documents_every_algo_key():
    from heron.config.base import field_docs
    from heron.config.root import HeronConfig

    rows = {key: text for key, text, _ in field_docs(HeronConfig)}
    for key in ["algo.loss_agg", "algo.clip_ratio_c", "algo.max_log_ratio", "algo.kl_in_reward", "algo.entropy_coef",
                "algo.off_policy.mode", "algo.off_policy.tis_cap", "algo.off_policy.mask_low", "algo.off_policy.mask_high",
                "rollout.dynamic_sampling.enabled", "rollout.dynamic_sampling.max_rounds",
                "reward.overlong_buffer", "reward.overlong_penalty", "algo.gamma", "algo.lam",
                "critic.path", "critic.lr", "critic.weight_decay", "critic.betas", "critic.eps", "critic.grad_clip",
                "critic.value_clip"]:
        assert rows.get(key), key
