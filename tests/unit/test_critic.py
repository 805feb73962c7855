"""PPO with a learned critic, the pure parts, against hand-worked numbers: the outcome reward's
token, whitening, explained variance, the value model's alignment with the response tokens, the
advantage stage end to end, and the critic's update (micro-batching gives the mini-batch update).

A stub backbone makes every number checkable by hand: its hidden state at position t is the
token id there (hidden size 1), and the head is set to w = 1, b = 0, so V(s_t) = input_ids[t].
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from heron.algo.gae import outcome_token_rewards
from heron.algo.value_loss import clipped_value_loss, explained_variance
from heron.algo.whiten import masked_whiten
from heron.config.algo import AlgoConfig
from heron.config.critic import CriticConfig
from heron.critic.advantage_stage import critic_advantages
from heron.critic.critic import Critic
from heron.critic.value_model import ValueModel
from heron.records import Group, Prompt, RolloutBatch, Sample
from heron.trainer.batch import collate

PAD = 0


class TokenIdBackbone(torch.nn.Module):
    """hidden[b, t] = [input_ids[b, t]]: V(s_t) is the token id at t once the head is w=1, b=0."""

    def forward(self, input_ids, attention_mask, use_cache=False):
        return SimpleNamespace(last_hidden_state=input_ids.float().unsqueeze(-1))  # [B, L, 1]


def _critic(steps: int = 1, micro: int = 8, max_tokens: int = 0, total_steps: int = 1, **cfg) -> Critic:
    model = ValueModel(TokenIdBackbone(), hidden_size=1)
    with torch.no_grad():
        model.value_head.weight.fill_(1.0)
    return Critic(model, CriticConfig(**cfg), steps_per_rollout=steps, micro_batch_size=micro,
                  max_tokens_per_micro_batch=max_tokens, total_steps=total_steps)


def _sample(index: int, prompt: list[int], response: list[int], reward: float, mask: list[int] | None = None) -> Sample:
    return Sample(
        rollout_id=0, prompt_id=index, sample_index=0, policy_version=0, prompt_tokens=prompt,
        response_tokens=response, response_logprobs=[0.0] * len(response), loss_mask=mask or [1] * len(response),
        response_text="", finish_reason="stop", reward=reward,
    )


def _batch(*samples: Sample) -> RolloutBatch:
    return RolloutBatch(0, 0, [Group(Prompt(s.prompt_id, "", ""), [s]) for s in samples])


def test_outcome_reward_sits_at_the_last_policy_token():
    # row 0: policy tokens at 1 and 2 (3 is padding); row 1: the last token is tool output (mask 0),
    # so the reward goes to position 1; row 2 has no policy token and gets no reward
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.float32)
    out = outcome_token_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert torch.equal(out, torch.tensor([[0, 0, 2.0, 0], [0, 3.0, 0, 0], [0, 0, 0, 0]]))


def test_whitening_over_the_valid_tokens_only():
    # valid: 1 and 3 (the 9s and the whole second row are masked): mean 2, unbiased var
    # ((1-2)^2 + (3-2)^2) / (2 - 1) = 2, so -1/sqrt(2) and +1/sqrt(2); masked positions give 0
    x = torch.tensor([[9.0, 1.0, 3.0, 9.0], [5.0, 5.0, 5.0, 5.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.float32)
    expected = torch.tensor([[0, -1 / math.sqrt(2), 1 / math.sqrt(2), 0], [0, 0, 0, 0]])
    torch.testing.assert_close(masked_whiten(x, mask), expected)


def test_whitening_a_single_token_or_equal_tokens_gives_zero():
    assert torch.equal(masked_whiten(torch.tensor([[4.0, 7.0]]), torch.tensor([[0.0, 1.0]])), torch.zeros(1, 2))
    assert torch.equal(masked_whiten(torch.tensor([[2.0, 2.0]]), torch.ones(1, 2)), torch.zeros(1, 2))


def test_explained_variance_hand_values():
    returns, mask = torch.tensor([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == 1.0  # perfect prediction
    assert explained_variance(torch.full((1, 4), 5.0), returns, mask) == 0.0  # a constant: no better than the mean
    # V = [3, 2, 1]: residual [-2, 0, 2], variance 8/3 vs Var(R) = 2/3 -> 1 - 4 = -3
    assert explained_variance(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), returns, mask) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(returns, torch.ones(1, 4), mask))  # returns that do not vary


def test_values_align_with_the_loss_positions_of_the_response():
    # prompt [5, 6], response [7, 8]: response token 7 is chosen in state s_1 (after token 6) and
    # token 8 in s_2 (after 7); the loss mask marks positions 1, 2 and the values there are 6, 7
    batch = collate([_sample(0, [5, 6], [7, 8], 1.0)], PAD)
    values = _critic().values(batch)
    assert torch.equal(batch.loss_mask, torch.tensor([[0.0, 1.0, 1.0]]))
    assert torch.equal(values, torch.tensor([[0.0, 6.0, 7.0]]))  # masked position 0 (V = 5) is zeroed


def test_the_advantage_stage_end_to_end():
    # sample a: prompt [5, 6], response [7, 8], reward 10: V = [6, 7], gamma = lambda = 1 ->
    #   A = 10 - V = [4, 3], R = [10, 10]
    # sample b: prompt [1], response [2, 3, 4], reward 0: V = [1, 2, 3] -> A = [-1, -2, -3], R = [0, 0, 0]
    # whitening over the 5 tokens: mean 0.2, deviations [3.8, 2.8, -1.2, -2.2, -3.2], unbiased var 38.8 / 4 = 9.7
    batch = _batch(_sample(0, [5, 6], [7, 8], 10.0), _sample(1, [1], [2, 3, 4], 0.0))
    a, b = critic_advantages(batch, _critic(), PAD, AlgoConfig(advantage="gae")).samples
    std = math.sqrt(9.7)
    assert a.values == [6.0, 7.0] and b.values == [1.0, 2.0, 3.0]
    assert a.returns == [10.0, 10.0] and b.returns == [0.0, 0.0, 0.0]
    assert a.token_advantages == pytest.approx([3.8 / std, 2.8 / std])
    assert b.token_advantages == pytest.approx([-1.2 / std, -2.2 / std, -3.2 / std])
    assert a.advantage == pytest.approx(3.3 / std)  # the mean of its tokens' advantages, for display
    # the trainer's batch carries them at the loss positions
    rows = collate(batch.samples, PAD)
    assert rows.advantages.shape == rows.loss_mask.shape == (2, 3)
    torch.testing.assert_close(rows.advantages[0], torch.tensor([0.0, 3.8 / std, 2.8 / std]))
    assert torch.equal(rows.returns, torch.tensor([[0.0, 10.0, 10.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(rows.old_values, torch.tensor([[0.0, 6.0, 7.0], [1.0, 2.0, 3.0]]))


def test_the_advantage_stage_discounts_and_subtracts_the_reward_penalty():
    # penalty 2 -> reward 8 at the last token; gamma 0.5, lambda 1: R_1 = 8, R_0 = 0.5 * 8 = 4;
    # A = R - V = [4 - 6, 8 - 7] = [-2, 1], whitened: mean -0.5, var (2.25 + 2.25) / 1 = 4.5
    batch = _batch(_sample(0, [5, 6], [7, 8], 10.0))
    (a,) = critic_advantages(batch, _critic(), PAD, AlgoConfig(advantage="gae", gamma=0.5), penalties=[2.0]).samples
    assert a.returns == pytest.approx([4.0, 8.0])
    assert a.token_advantages == pytest.approx([-1.5 / math.sqrt(4.5), 1.5 / math.sqrt(4.5)])


def test_a_batch_mixing_token_level_and_sequence_advantages_is_refused():
    a, b = _sample(0, [5], [7], 1.0), _sample(1, [5], [7], 1.0)
    a.token_advantages, a.values, a.returns = [1.0], [0.0], [1.0]
    with pytest.raises(ValueError, match="has no token-level advantages while others of its batch do"):
        collate([a, b], PAD)


def _train_batch():
    batch = _batch(_sample(0, [5, 6], [7, 8], 10.0), _sample(1, [1], [2, 3, 4], 0.0),
                   _sample(2, [2], [3], 4.0), _sample(3, [1, 1], [2], -1.0))
    return collate(critic_advantages(batch, _critic(), PAD, AlgoConfig(advantage="gae")).samples, PAD)


def test_one_critic_step_is_the_clipped_value_loss_of_the_mini_batch():
    # the head's gradient of 0.5 max(...) / n over every token, one AdamW step: the first
    # AdamW step moves every parameter by lr * sign(grad) (m / sqrt(v) = g / |g|)
    rows = _train_batch()
    critic = _critic(value_clip=0.2, lr=0.1, grad_clip=0)
    head = critic.model.value_head
    values = head(rows.input_ids[:, :-1].float().unsqueeze(-1)).squeeze(-1)
    expected = clipped_value_loss(values, rows.old_values, rows.returns, rows.loss_mask, clip=0.2)
    expected.loss.backward()
    grad_w = head.weight.grad.clone()
    before = head.weight.detach().clone()
    metrics = critic.train(rows)
    assert metrics["value_loss"] == pytest.approx(float(expected.loss.detach()))
    assert metrics["clip_frac"] == pytest.approx(float(expected.clip_fraction))
    torch.testing.assert_close(head.weight.detach(), before - 0.1 * torch.sign(grad_w), rtol=0, atol=1e-6)
    assert metrics["value_mean"] == pytest.approx(float((rows.old_values * rows.loss_mask).sum() / rows.loss_mask.sum()))


def test_micro_batching_gives_the_mini_batch_update_and_steps_split_like_the_policy():
    rows = _train_batch()
    whole, micro = _critic(steps=2, micro=2), _critic(steps=2, micro=1)
    m_whole, m_micro = whole.train(rows), micro.train(rows)
    for a, b in zip(whole.model.parameters(), micro.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert m_whole["value_loss"] == pytest.approx(m_micro["value_loss"], abs=1e-6)
    # two steps differ from one step on the whole batch
    once = _critic(steps=1, micro=4)
    once.train(rows)
    assert not torch.equal(once.model.value_head.weight, whole.model.value_head.weight)


def test_packed_micro_batches_put_values_in_their_rows_and_give_the_row_update():
    """train.max_tokens_per_micro_batch packs the critic's rows like the policy's: rows of 4, 4, 2
    and 3 tokens under a budget of 6 -> [0], [1], [3, 2] (cut to 3 positions)."""
    rows = _train_batch()
    packed, whole = _critic(max_tokens=6), _critic(micro=4)
    assert [(p.length, p.batch.old_values.shape[1]) for p in packed._micro_batches(rows)] == [(4, 3), (4, 3), (3, 2)]
    assert torch.equal(packed.values(rows), whole.values(rows))  # V = token id: exact
    m_packed, m_whole = packed.train(rows), whole.train(rows)
    assert m_packed["value_loss"] == pytest.approx(m_whole["value_loss"], abs=1e-6)
    for a, b in zip(packed.model.parameters(), whole.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_value_head_starts_at_zero():
    model = ValueModel(TokenIdBackbone(), hidden_size=1)
    assert torch.equal(model(torch.tensor([[3, 4, 5]]), torch.ones(1, 3)), torch.zeros(1, 2))


def test_the_critic_lr_warms_up_then_decays_on_its_schedule():
    """critic.warmup_steps=2, cosine to 0.1 over 4 steps (heron.trainer.lr_schedule): multipliers
    1/2, 2/2, then 0.1 + 0.9 * 0.5 * (1 + cos(pi * p)) at p = 0 and 1/2 -> 1 and 0.55."""
    rows = _train_batch()
    critic = _critic(total_steps=4, lr=1e-2, warmup_steps=2, lr_schedule="cosine", min_lr_ratio=0.1)
    lrs = [critic.train(rows)["lr"] for _ in range(4)]
    assert lrs == pytest.approx([5e-3, 1e-2, 1e-2, 5.5e-3], rel=1e-12)
    assert _critic(lr=1e-2).train(rows)["lr"] == 1e-2  # constant by default

