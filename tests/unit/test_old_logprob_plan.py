"""Where the old logprobs of a rollout come from (``heron.trainer.old_logprobs``): the separate
no-grad forward runs exactly where its values differ from the first training forward's or are
needed before it (issue 14, item 2)."""

import pytest

from heron.config.algo import AlgoConfig
from heron.config.base import ConfigError
from heron.config.off_policy import OffPolicyConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective, SFTObjective
from heron.trainer.old_logprobs import plan_old_logprobs


def _plan(algo=None, **train_kw):
    return plan_old_logprobs(TrainConfig(**train_kw), PolicyObjective(algo or AlgoConfig()))


def test_one_step_on_policy_reuses_the_training_forward():
    plan = _plan()
    assert plan.source == "training_forward" and not plan.runs_forward
    assert "one optimizer step" in plan.reason


@pytest.mark.parametrize(
    "algo,train_kw,why",
    [
        (None, {"steps_per_rollout": 2}, "steps_per_rollout=2"),
        (AlgoConfig(off_policy=OffPolicyConfig(mode="tis")), {}, "algo.off_policy"),
        (AlgoConfig(off_policy=OffPolicyConfig(mode="mis")), {}, "algo.off_policy"),
        (None, {"old_logprobs_forward": "always"}, "old_logprobs_forward=always"),
    ],
    ids=["several-steps", "tis", "mis", "always"],
)
def test_the_forward_runs_where_it_is_needed(algo, train_kw, why):
    plan = _plan(algo, **train_kw)
    assert plan.source == "forward" and plan.runs_forward
    assert why in plan.reason


def test_without_recompute_the_engine_logprobs_are_used():
    plan = _plan(recompute_old_logprobs=False)
    assert plan.source == "engine" and not plan.runs_forward
    sft = plan_old_logprobs(TrainConfig(recompute_old_logprobs=False), SFTObjective())
    assert sft.source == "engine"


def test_every_algo_loss_reuses_on_policy():
    # the policy losses read old logprobs only inside the loss, token by token or per sequence
    for algo in (AlgoConfig(loss="gspo", loss_agg="seq-mean-token-mean"), AlgoConfig(loss="cispo")):
        assert _plan(algo).source == "training_forward", algo.loss
    assert _plan(AlgoConfig(clip_ratio_c=3.0)).source == "training_forward"
    assert _plan(AlgoConfig(kl_coef=0.1, kl_in_reward=True, kl_estimator="k1")).source == "training_forward"


def test_always_without_recompute_is_a_config_error():
    with pytest.raises(ConfigError, match="train.old_logprobs_forward=always needs train.recompute_old_logprobs=true"):
        TrainConfig(recompute_old_logprobs=False, old_logprobs_forward="always")
