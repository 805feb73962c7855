"""The checkpoint's finite check finds an inf or nan wherever it sits: in a vector lane or the
tail of the min/max kernel, in every floating dtype, alone or among large finite values."""

from __future__ import annotations

import pytest
import torch

from heron.checkpoint.finite import nonfinite_tensors

SIZES = [1, 7, 8, 15, 16, 17, 31, 33, 64, 65, 1000, 4099]  # around every SIMD width and unroll
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_every_position_of_every_size_is_seen(dtype, bad):
    for size in SIZES:
        for position in sorted({0, size // 2, size - 1, *range(min(size, 17))}):
            t = torch.full((size,), torch.finfo(dtype).max, dtype=dtype)  # finite, as large as it gets
            t[position] = bad
            assert nonfinite_tensors({"model": {"w": t}}) == ["w"], (size, position)


def test_finite_state_names_nothing_and_bad_tensors_are_named_in_order():
    finite = torch.randn(100)
    nan = torch.randn(3, 5)
    nan[2, 4] = float("nan")
    state = {
        "model": {"a": finite, "b": nan, "steps": torch.tensor([3, 4])},  # integer tensors are skipped
        "optimizer": {"state": {"a": {"exp_avg": torch.tensor([float("-inf")]), "exp_avg_sq": finite}}},
    }
    assert nonfinite_tensors(state) == ["b", "optimizer.state.a.exp_avg"]
    assert nonfinite_tensors({"model": {"a": finite, "e": torch.empty(0)}}) == []
