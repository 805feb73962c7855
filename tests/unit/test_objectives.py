"""The policy objective's terms: entropy bonus, mismatch weights, aggregation of every term."""

import pytest
import torch

from heron.algo.loss_agg import LossNormalizer
from heron.config.algo import AlgoConfig
from heron.trainer.batch import TrainBatch
from heron.trainer.objectives import PolicyObjective

# two rows of 2 and 1 policy tokens; ratio 1 everywhere (old = logprobs)
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
LOGP = torch.tensor([[-0.5, -1.0], [-2.0, 0.0]])
ENTROPY = torch.tensor([[0.6, 0.3], [0.9, 5.0]])
ADV = torch.tensor([1.0, -2.0])


def _micro(mismatch_weights=None):
    return TrainBatch(0, 0, ["a", "b"], torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long),
                      MASK, ADV, LOGP.clone(), mismatch_weights)


def _call(cfg, micro=None, ref=None):
    objective = PolicyObjective(cfg, max_response_tokens=2)
    logp, entropy = LOGP.clone().requires_grad_(), ENTROPY.clone().requires_grad_()
    from heron.algo.loss_agg import normalizer

    norm = normalizer(*objective.denominators(MASK))
    loss, metrics = objective(micro or _micro(), logp, entropy, ref, norm)
    loss.backward()
    return loss, metrics, logp.grad, entropy.grad


def test_default_is_the_token_mean_pg_loss():
    # l_t = -A: (-1 - 1 + 2) / 3 = 0; entropy metric (0.6 + 0.3 + 0.9) / 3 = 0.6
    loss, metrics, grad, entropy_grad = _call(AlgoConfig())
    assert loss.item() == pytest.approx(0.0)
    assert metrics["entropy"].item() == pytest.approx(0.6)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 3, -1 / 3], [2 / 3, 0.0]]))
    assert entropy_grad is None or torch.equal(entropy_grad, torch.zeros(2, 2))


def test_entropy_bonus_subtracts_coef_times_entropy_and_raises_it():
    loss, metrics, _, entropy_grad = _call(AlgoConfig(entropy_coef=0.1))
    assert loss.item() == pytest.approx(0.0 - 0.1 * 0.6)
    torch.testing.assert_close(entropy_grad, torch.tensor([[-0.1 / 3, -0.1 / 3], [-0.1 / 3, 0.0]]))


def test_seq_mean_token_mean_aggregates_every_term_alike():
    # pg: (mean(-1, -1) + mean(2)) / 2 = 0.5; entropy: (0.45 + 0.9) / 2 = 0.675; loss = 0.5 - 0.1 * 0.675
    loss, metrics, grad, _ = _call(AlgoConfig(loss_agg="seq-mean-token-mean", entropy_coef=0.1))
    assert loss.item() == pytest.approx(0.5 - 0.0675)
    assert metrics["entropy"].item() == pytest.approx(0.675)
    torch.testing.assert_close(grad, torch.tensor([[-0.25, -0.25], [1.0, 0.0]]))


def test_seq_mean_token_sum_metrics_stay_means():
    # pg: (-2 + 2) / 2 = 0; the metric normaliser is the token count: entropy 0.6, clip fraction 0
    loss, metrics, _, _ = _call(AlgoConfig(loss_agg="seq-mean-token-sum"))
    assert loss.item() == pytest.approx(0.0)
    assert metrics["entropy"].item() == pytest.approx(0.6)


def test_mismatch_weights_scale_the_policy_loss_only():
    # weights [0.5, 1], [0, -]: pg = (-0.5 - 1 + 0) / 3 = -0.5; kl term to ref (k2 of 0.1 per token) unweighted
    micro = _micro(torch.tensor([[0.5, 1.0], [0.0, 1.0]]))
    ref = LOGP - 0.1
    loss, metrics, grad, _ = _call(AlgoConfig(kl_coef=1.0, kl_estimator="k2"), micro, ref)
    kl = 0.5 * 0.1**2  # per token, mean over 3 tokens
    assert metrics["pg_loss"].item() == pytest.approx(-0.5)
    assert metrics["kl"].item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(-0.5 + kl)
    # grads: pg -w A / 3 plus k2's d/dlogp = (logp - ref) / 3 = 0.1 / 3
    torch.testing.assert_close(grad, torch.tensor([[-0.5 / 3 + 0.1 / 3, -1 / 3 + 0.1 / 3], [0.1 / 3, 0.0]]))


def test_kl_in_reward_needs_no_reference_in_the_loss():
    assert PolicyObjective(AlgoConfig(kl_coef=0.1)).needs_reference
    assert not PolicyObjective(AlgoConfig(kl_coef=0.1, kl_in_reward=True, kl_estimator="k1")).needs_reference


def test_normalizer_to_metric_is_identity_when_equal():
    value = torch.tensor(0.3)
    assert LossNormalizer(4.0, 4.0).to_metric(value) is value
    assert LossNormalizer(2.0, 4.0).to_metric(value).item() == pytest.approx(0.15)


def test_no_correction_without_an_off_policy_mode():
    old, engine = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]])
    assert PolicyObjective(AlgoConfig()).engine_mismatch(old, engine, torch.ones(1, 2), 2.0) == (None, {})
