"""PPO clipped-surrogate loss, checked against hand-worked numbers.

Each case sets old_logprobs = 0 and logprobs = log(ratio), so ratio is exact. With
normalizer n, a token's gradient wrt its logprob is -ratio * A / n when unclipped
(d ratio / d logp = ratio) and 0 when the clipped term is selected.
"""

import math

import pytest
import torch

from heron.algo.losses import POLICY_LOSSES
from heron.algo.policy_loss import ppo_clip_loss

pytestmark = pytest.mark.portability  # float32 results against hand-worked numbers


def _logprobs(ratios: list[list[float]]) -> torch.Tensor:
    return torch.log(torch.tensor(ratios)).requires_grad_()


def test_ratio_one_gives_minus_mean_advantage():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]], requires_grad=True)
    out = ppo_clip_loss(logp, logp.detach().clone(), torch.tensor([1.0, -2.0]), torch.ones(2, 3))
    # -(3 * 1 + 3 * -2) / 6 = 0.5
    assert out.loss.item() == pytest.approx(0.5)
    assert out.clip_fraction.item() == 0.0
    assert out.approx_kl.item() == 0.0
    assert out.ratio_mean.item() == pytest.approx(1.0)


def test_clip_cases_for_both_advantage_signs():
    # token: (ratio, A) -> min picks         -> loss     -> grad (n = 4)
    # 0: (1.5, +1) -> clipped 1.2 * 1        -> -1.2     -> 0, clipped
    # 1: (0.5, +1) -> unclipped 0.5 < 0.8    -> -0.5     -> -0.5 / 4 = -0.125
    # 2: (0.5, -1) -> clipped -0.8 < -0.5    -> 0.8      -> 0, clipped
    # 3: (1.5, -1) -> unclipped -1.5 < -1.2  -> 1.5      -> 1.5 / 4 = 0.375
    logp = _logprobs([[1.5, 0.5, 0.5, 1.5]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    out = ppo_clip_loss(logp, torch.zeros(1, 4), advantages, torch.ones(1, 4))
    out.loss.backward()
    assert out.loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 1.5) / 4)  # 0.15
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.125, 0.0, 0.375]]))
    assert out.clip_fraction.item() == pytest.approx(0.5)
    # k3(old || new) = ratio - log ratio - 1: 1.5 -> 0.094535, 0.5 -> 0.193147
    assert out.approx_kl.item() == pytest.approx(2 * (0.094535 + 0.193147) / 4, abs=1e-6)  # 0.143841
    assert out.ratio_mean.item() == pytest.approx(1.0)
    assert not out.clip_fraction.requires_grad and not out.approx_kl.requires_grad


def test_asymmetric_clip_range():
    # ratio 1.25, A = +1: clipped at 1.2 by default, inside [0.8, 1.28] with clip_high = 0.28
    # ratio 0.75, A = -1: clipped at 0.8 by default, inside [0.7, 1.2] with clip_low = 0.3
    old, adv, mask = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    default = ppo_clip_loss(_logprobs([[1.25, 0.75]]), old, adv, mask)
    assert default.loss.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert default.clip_fraction.item() == pytest.approx(1.0)
    wide = ppo_clip_loss(_logprobs([[1.25, 0.75]]), old, adv, mask, clip_low=0.3, clip_high=0.28)
    assert wide.loss.item() == pytest.approx((-1.25 + 0.75) / 2)
    assert wide.clip_fraction.item() == 0.0


def test_zero_advantage_is_not_counted_as_clipped():
    out = ppo_clip_loss(_logprobs([[2.0]]), torch.zeros(1, 1), torch.tensor([0.0]), torch.ones(1, 1))
    assert out.loss.item() == 0.0
    assert out.clip_fraction.item() == 0.0


def test_mask_excludes_tokens():
    # token 2 is masked: its ratio 3 would be clipped; loss = -(1.0 * 2 + 0.5 * 2) / 2 = -1.5
    logp = _logprobs([[1.0, 0.5, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = ppo_clip_loss(logp, torch.zeros(1, 3), torch.tensor([2.0]), mask)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.5)
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -0.5, 0.0]]))  # -ratio * A / 2
    assert out.clip_fraction.item() == 0.0
    assert out.ratio_mean.item() == pytest.approx(0.75)


def test_empty_mask_gives_zero_not_nan():
    out = ppo_clip_loss(_logprobs([[1.5, 0.5]]), torch.zeros(1, 2), torch.tensor([1.0]), torch.zeros(1, 2))
    assert out.loss.item() == 0.0
    assert out.approx_kl.item() == 0.0


def test_per_sequence_advantages_broadcast_over_tokens():
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.1, 0.9]]))
    old, mask = torch.zeros(2, 2), torch.ones(2, 2)
    per_seq = ppo_clip_loss(logp, old, torch.tensor([1.0, -3.0]), mask)
    per_token = ppo_clip_loss(logp, old, torch.tensor([[1.0, 1.0], [-3.0, -3.0]]), mask)
    # -(1.2 + 0.5 - 3.3 - 2.7) / 4 = 1.075
    assert per_seq.loss.item() == pytest.approx(1.075)
    assert per_token.loss.item() == pytest.approx(1.075)


def test_explicit_normalizer():
    # same tokens as test_clip_cases_for_both_advantage_signs: loss sum 0.6, now / 8
    out = ppo_clip_loss(
        _logprobs([[1.5, 0.5, 0.5, 1.5]]), torch.zeros(1, 4), torch.tensor([[1.0, 1.0, -1.0, -1.0]]),
        torch.ones(1, 4), normalizer=8.0,
    )
    assert out.loss.item() == pytest.approx(0.075)
    assert out.clip_fraction.item() == pytest.approx(0.25)


def test_micro_batches_with_shared_normalizer_match_full_batch():
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=gen) * 2).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(4, 6, generator=gen)
    advantages = torch.randn(4, generator=gen)
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 5 + [0], [1] * 3 + [0] * 3], dtype=torch.float32)

    full = ppo_clip_loss(logp, old, advantages, mask)
    full.loss.backward()
    full_grad = logp.grad.clone()
    logp.grad = None

    num_tokens = mask.sum()  # 16, the whole mini-batch
    micro = [
        ppo_clip_loss(logp[rows], old[rows], advantages[rows], mask[rows], normalizer=num_tokens)
        for rows in (slice(0, 1), slice(1, 4))
    ]
    for out in micro:
        out.loss.backward()  # gradient accumulation

    assert 0 < full.clip_fraction.item() < 1  # the case exercises both branches
    torch.testing.assert_close(sum(m.loss for m in micro), full.loss)
    torch.testing.assert_close(logp.grad, full_grad)
    for field in ("clip_fraction", "approx_kl", "ratio_mean"):
        torch.testing.assert_close(sum(getattr(m, field) for m in micro), getattr(full, field))


def test_rejects_bad_clip_range():
    with pytest.raises(ValueError, match="clip_low"):
        ppo_clip_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), clip_low=1.0)


def test_registry():
    assert POLICY_LOSSES["ppo_clip"] is ppo_clip_loss


# --- dual-clip and the log-ratio clamp ---


def test_dual_clip_caps_the_loss_of_negative_advantages():
    # token: (ratio, A)  PPO loss                   with c = 3         grad (n = 4)
    # 0: (5, -1)  -min(-5, -1.2) = 5                capped at 3       0 (capped)
    # 1: (2, -1)  -min(-2, -1.2) = 2                2 < 3, kept       2 / 4 = 0.5
    # 2: (5, +1)  -min(5, 1.2) = -1.2               A > 0: untouched  0 (clipped)
    # 3: (0.5, -1) -min(-0.5, -0.8) = 0.8           0.8 < 3           0 (clipped)
    logp = _logprobs([[5.0, 2.0, 5.0, 0.5]])
    adv = torch.tensor([[-1.0, -1.0, 1.0, -1.0]])
    plain = ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4))
    assert plain.loss.item() == pytest.approx((5 + 2 - 1.2 + 0.8) / 4)
    dual = ppo_clip_loss(logp, torch.zeros(1, 4), adv, torch.ones(1, 4), clip_ratio_c=3.0)
    dual.loss.backward()
    assert dual.loss.item() == pytest.approx((3 + 2 - 1.2 + 0.8) / 4)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.5, 0.0, 0.0]]))
    assert dual.extra["dual_clip_fraction"].item() == pytest.approx(0.25)


def test_dual_clip_needs_c_above_one():
    with pytest.raises(ValueError, match="clip_ratio_c > 1"):
        ppo_clip_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), clip_ratio_c=0.5)


def test_stale_old_logprobs_cannot_give_inf_or_nan():
    # old logprob -100 for a token now at logp 0: ratio e^100 overflows float32 (inf);
    # A = -1 gives an inf loss, A = 0 gives inf * 0 = nan, without the clamp
    logp = torch.zeros(1, 2, requires_grad=True)
    old = torch.full((1, 2), -100.0)
    adv = torch.tensor([[-1.0, 0.0]])
    raw = ppo_clip_loss(logp, old, adv, torch.ones(1, 2), max_log_ratio=0.0)
    assert not torch.isfinite(raw.loss)
    clamped = ppo_clip_loss(logp, old, adv, torch.ones(1, 2))  # default clamp at 20
    # token 0: ratio e^20 = 4.85165e8, loss = ratio * 1; token 1: 0; mean over 2
    assert clamped.loss.item() == pytest.approx(math.exp(20) / 2, rel=1e-6)
    clamped.loss.backward()
    assert torch.equal(logp.grad, torch.zeros(1, 2))  # clamped tokens get no gradient
    capped = ppo_clip_loss(logp, old, adv, torch.ones(1, 2), clip_ratio_c=3.0)
    assert capped.loss.item() == pytest.approx(1.5)  # (3 * |A| + 0) / 2


@pytest.mark.parametrize("log_ratio", [-20.0, 20.0])
def test_extreme_ratios_on_both_sides_pick_the_pessimistic_term(log_ratio):
    # ratio e^-20 ~ 2e-9 or e^20 ~ 4.9e8, A = +1 and -1 on two tokens
    ratio = math.exp(log_ratio)
    logp = torch.full((1, 2), log_ratio, requires_grad=True)
    out = ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2))
    out.loss.backward()
    if log_ratio < 0:  # A > 0: unclipped r A (tiny, has gradient); A < 0: clipped at 0.8 (no gradient)
        assert out.loss.item() == pytest.approx((-ratio + 0.8) / 2)
        torch.testing.assert_close(logp.grad, torch.tensor([[-ratio / 2, 0.0]]))
    else:  # A > 0: clipped at 1.2 (no gradient); A < 0: unclipped r |A| (huge, has gradient)
        assert out.loss.item() == pytest.approx((-1.2 + ratio) / 2, rel=1e-6)
        torch.testing.assert_close(logp.grad, torch.tensor([[0.0, ratio / 2]]))
    assert out.clip_fraction.item() == pytest.approx(0.5)


def test_token_weights_in_the_mask_weight_each_token():
    # weights [0.5, 0.5, 1.0] (seq-mean-token-mean of rows of 2 and 1 tokens), normalizer 2 sequences
    # ratio 1: l_t = -A_t -> -(0.5 * 2 + 0.5 * 2 + 1 * -1) / 2 = -0.5
    logp = torch.zeros(2, 2, requires_grad=True)
    weights = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    out = ppo_clip_loss(logp, torch.zeros(2, 2), torch.tensor([2.0, -1.0]), weights, normalizer=2.0)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.5)
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.0]]))  # -w A / 2


def test_all_masked_rows_contribute_nothing():
    logp = torch.tensor([[0.3, -0.2], [float("nan"), float("inf")]], requires_grad=True)
    out = ppo_clip_loss(logp, torch.zeros(2, 2), torch.tensor([1.0, 5.0]), torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert torch.equal(logp.grad[1], torch.zeros(2))
