"""Per-token KL estimators, checked against hand-worked numbers."""

import math

import pytest
import torch

from heron.algo.kl import kl_penalty

pytestmark = pytest.mark.portability  # float32 results against hand-worked numbers


def test_k1_and_k3_hand_values():
    # logp = log 0.5, ref = log 0.25: log r = ref - logp = log 0.5 = -0.693147
    # k1 = logp - ref = log 2 = 0.693147; k3 = r - log r - 1 = 0.5 + 0.693147 - 1 = 0.193147
    # swapped: log r = log 2; k1 = -0.693147; k3 = 2 - 0.693147 - 1 = 0.306853
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([[0.693147, -0.693147]]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.tensor([[0.193147, 0.306853]]))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_identical_policies_give_zero(estimator):
    logp = torch.log(torch.tensor([[0.1, 0.7, 0.2]]))
    assert torch.equal(kl_penalty(logp, logp.clone(), estimator), torch.zeros(1, 3))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_expectation_under_policy_is_exact_kl(estimator):
    # p = [0.5, 0.5], q = [0.25, 0.75]:
    # KL(p || q) = 0.5 log(0.5 / 0.25) + 0.5 log(0.5 / 0.75) = 0.5 (0.693147 - 0.405465) = 0.143841
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([0.25, 0.75])
    per_token = kl_penalty(p.log(), q.log(), estimator)
    assert (p * per_token).sum().item() == pytest.approx(0.143841, abs=1e-6)


def test_k3_is_non_negative():
    logp = torch.linspace(-8.0, 0.0, 33)
    ref = logp.flip(0)
    k3 = kl_penalty(logp, ref, "k3")
    assert (k3 >= 0).all()
    assert kl_penalty(logp, ref, "k1").min().item() == pytest.approx(-8.0)


def test_k3_keeps_gradient():
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    kl_penalty(logp, torch.tensor([math.log(0.25)]), "k3").sum().backward()
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = -r + 1 = 1 - 0.5 = 0.5
    torch.testing.assert_close(logp.grad, torch.tensor([0.5]))


def test_unknown_estimator_names_valid_ones():
    with pytest.raises(ValueError, match="k1, k3"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k2")  # type: ignore[arg-type]
