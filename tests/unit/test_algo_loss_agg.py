"""Loss aggregation modes, checked against hand-worked numbers, and the property that makes
micro-batching exact: micro-batch losses with the mini-batch normaliser sum to the
mini-batch loss (and their gradients to its gradient) in every mode."""

import pytest
import torch

from heron.algo import loss_agg
from heron.algo.masked import masked_sum
from heron.algo.policy_loss import ppo_clip_loss

# rows of 3, 1 and 0 policy tokens; the 0-token row is all padding
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
TERMS = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0], [99.0] * 4])


@pytest.mark.parametrize(
    "mode, expected, denominators",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4, (4.0, 4.0)),
        ("seq-mean-token-sum", (6 + 4) / 2, (2.0, 4.0)),  # the empty row is not a sequence
        ("seq-mean-token-mean", (2 + 4) / 2, (2.0, 2.0)),
        ("seq-mean-token-sum-norm", 10 / (3 * 4), (12.0, 4.0)),  # B = 3 rows x L = 4, a constant
    ],
)
def test_modes(mode, expected, denominators):
    loss_den, metric_den = loss_agg.denominators(MASK, mode, max_response_tokens=4)
    assert (loss_den, metric_den) == denominators
    norm = loss_agg.normalizer(loss_den, metric_den)
    assert (masked_sum(TERMS, loss_agg.token_weights(MASK, mode)) / norm.loss).item() == pytest.approx(expected)


def test_metric_normaliser_keeps_fractions_fractions():
    # a diagnostic that is 1 on every token must average to 1 under every mode
    ones = torch.ones_like(TERMS)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        norm = loss_agg.normalizer(*loss_agg.denominators(MASK, mode, max_response_tokens=4))
        as_loss = masked_sum(ones, loss_agg.token_weights(MASK, mode)) / norm.loss
        assert norm.to_metric(as_loss).item() == pytest.approx(1.0), mode


def test_token_mean_weights_are_the_mask_itself():
    assert loss_agg.token_weights(MASK, "token-mean") is MASK


def test_dr_grpo_norm_needs_a_length():
    with pytest.raises(ValueError, match="max_response_tokens"):
        loss_agg.denominators(MASK, "seq-mean-token-sum-norm")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_with_the_mini_batch_normaliser_match_the_full_batch(mode):
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(5, 6, generator=gen) * 2).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(5, 6, generator=gen)
    advantages = torch.randn(5, generator=gen)
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 5 + [0], [0] * 6, [1] * 3 + [0] * 3], dtype=torch.float32)
    norm = loss_agg.normalizer(*loss_agg.denominators(mask, mode, max_response_tokens=6))

    def loss(rows):
        return ppo_clip_loss(logp[rows], old[rows], advantages[rows], loss_agg.token_weights(mask[rows], mode),
                             normalizer=norm.loss)

    full = loss(slice(0, 5))
    full.loss.backward()
    full_grad, logp.grad = logp.grad.clone(), None
    micro = [loss(rows) for rows in (slice(0, 2), slice(2, 3), slice(3, 5))]
    for out in micro:
        out.loss.backward()
    assert 0 < full.clip_fraction.item()
    torch.testing.assert_close(sum(m.loss for m in micro), full.loss)
    torch.testing.assert_close(logp.grad, full_grad)
    torch.testing.assert_close(sum(m.clip_fraction for m in micro), full.clip_fraction)
