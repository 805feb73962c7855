"""Engine/trainer mismatch correction (TIS, MIS), checked against hand-worked numbers."""

import math

import pytest
import torch

from heron.algo.off_policy import engine_mismatch_weights

# trainer / engine ratios w = [2.5, 1.0, 0.4] on three policy tokens, then a pad
ENGINE = torch.zeros(1, 4)
OLD = torch.tensor([[math.log(2.5), 0.0, math.log(0.4), 123.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])


def test_none_corrects_nothing():
    assert engine_mismatch_weights(OLD, ENGINE, MASK, mode="none") == (None, {})


def test_tis_truncates_the_weight_at_the_cap():
    weights, metrics = engine_mismatch_weights(OLD, ENGINE, MASK, mode="tis", tis_cap=2.0)
    torch.testing.assert_close(weights[:, :3], torch.tensor([[2.0, 1.0, 0.4]]))
    assert metrics["mismatch/truncated_fraction"] == pytest.approx(1 / 3)


def test_mis_masks_tokens_outside_the_band():
    weights, metrics = engine_mismatch_weights(OLD, ENGINE, MASK, mode="mis", mask_low=0.5, mask_high=2.0)
    torch.testing.assert_close(weights[:, :3], torch.tensor([[0.0, 1.0, 0.0]]))
    assert metrics["mismatch/masked_fraction"] == pytest.approx(2 / 3)


def test_identical_logprobs_give_unit_weights():
    old = torch.tensor([[-1.3, -0.2]])
    for mode in ("tis", "mis"):
        weights, metrics = engine_mismatch_weights(old, old.clone(), torch.ones(1, 2), mode=mode)
        assert torch.equal(weights, torch.ones(1, 2))
        assert all(value == 0.0 for value in metrics.values()), metrics


def test_unknown_mode_names_valid_ones():
    with pytest.raises(ValueError, match="none, tis, mis"):
        engine_mismatch_weights(OLD, ENGINE, MASK, mode="is")
