"""Entropy from logits, checked against closed forms."""

import math

import pytest
import torch

from heron.algo.entropy import entropy_from_logits

pytestmark = pytest.mark.portability  # float32 results against hand-worked numbers


def test_uniform_is_log_vocab():
    # shifting logits does not change the distribution: H = log 4 = 1.386294 both times
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    torch.testing.assert_close(entropy_from_logits(logits), torch.full((2,), 1.386294))


def test_two_outcomes():
    # logits [0, log 3] -> p = [0.25, 0.75]
    # H = 0.25 log 4 + 0.75 log(4/3) = 0.346574 + 0.215762 = 0.562335
    logits = torch.tensor([0.0, math.log(3.0)])
    assert entropy_from_logits(logits).item() == pytest.approx(0.562335, abs=1e-6)


def test_near_one_hot_is_zero():
    assert entropy_from_logits(torch.tensor([100.0, 0.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


def test_large_logits_stay_finite():
    # naive softmax overflows at exp(1000); logsumexp does not. H = log 2 = 0.693147
    assert entropy_from_logits(torch.tensor([1000.0, 1000.0])).item() == pytest.approx(0.693147, abs=1e-6)


def test_reduces_last_dim_only():
    assert entropy_from_logits(torch.zeros(2, 3, 7)).shape == (2, 3)
