"""Masked reductions, checked against hand-worked numbers."""

import pytest
import torch

from heron.algo.masked import masked_mean, masked_sum

pytestmark = pytest.mark.portability  # float32 results against hand-worked numbers


X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [0, 1, 0]], dtype=torch.bool)


def test_masked_sum_all_and_per_dim():
    assert masked_sum(X, MASK).item() == 8.0  # 1 + 2 + 5
    torch.testing.assert_close(masked_sum(X, MASK, dim=-1), torch.tensor([3.0, 5.0]))


def test_masked_mean_all_and_per_dim():
    assert masked_mean(X, MASK).item() == pytest.approx(8.0 / 3.0)
    torch.testing.assert_close(masked_mean(X, MASK, dim=-1), torch.tensor([1.5, 5.0]))


def test_empty_mask_gives_zero_not_nan():
    empty = torch.zeros_like(MASK)
    assert masked_mean(X, empty).item() == 0.0
    torch.testing.assert_close(masked_mean(X, MASK & torch.tensor([[True], [False]]), dim=-1), torch.tensor([1.5, 0.0]))


def test_masked_out_nan_does_not_leak():
    x = torch.tensor([1.0, float("nan"), float("inf")])
    mask = torch.tensor([1.0, 0.0, 0.0])
    assert masked_sum(x, mask).item() == 1.0
    assert masked_mean(x, mask).item() == 1.0
