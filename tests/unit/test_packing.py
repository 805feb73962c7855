"""Micro-batches packed under a token budget (train.max_tokens_per_micro_batch): the grouping by
hand-worked examples, and on a real toy rollout the packed update equals the row-count one --
within the derived round-off bound under every loss aggregation (only the grouping of the float
sums changes), bit for bit where the grouping and padded length are the same."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from heron.algo.catalog import LOSS_AGGREGATIONS
from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective
from heron.trainer.packing import micro_batches, pack_rows, split_to_count
from heron.trainer.policy_trainer import PolicyTrainer
from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length
from tests.unit.test_trainer import _assert_logprobs_close, _rollout

MAX_NEW_TOKENS = 6  # _rollout's rollout.max_new_tokens


def test_pack_rows_longest_first_under_the_budget():
    assert pack_rows([3, 9, 4, 8], 16) == [[1], [3, 2], [0]]
    assert pack_rows([5, 5, 5, 5], 10) == [[0, 1], [2, 3]]  # ties keep batch order
    assert pack_rows([20, 2], 8) == [[0], [1]]  # a row over the budget goes alone
    assert pack_rows([2, 2, 2], 100) == [[0, 1, 2]]


def test_pack_rows_keeps_the_rows_of_a_prompt_together():
    """With each row's prompt id, a prompt's rows are taken one after the other (prompts by their
    longest row), so they can share the prompt in the forward (heron.trainer.shared_prompts)."""
    assert pack_rows([9, 3, 8, 4], 18) == [[0, 2], [3, 1]]
    assert pack_rows([9, 3, 8, 4], 18, prompts=[0, 0, 1, 1]) == [[0, 1], [2, 3]]
    # a micro-batch that starts inside a prompt (its row of 2) and takes the next one's rows of 9:
    # the budget holds against the longest row it holds, 9, not its first
    assert pack_rows([10, 2, 9, 9], 19, prompts=[0, 0, 1, 1]) == [[0], [1, 2], [3]]


def test_pack_rows_counts_what_a_group_holds_when_told():
    """``tokens``: a group's size other than rows x longest (shared prompts: the packed layout's);
    here each prompt's first row counts in full and its others by their length minus 5."""
    prompts = [0, 0, 0, 1]

    def held(group):
        return sum(n if k == 0 or prompts[group[k - 1]] != prompts[i] else n - 5
                   for k, (i, n) in enumerate((i, [9, 8, 7, 9][i]) for i in group))

    assert pack_rows([9, 8, 7, 9], 18, prompts) == [[0, 1], [2, 3]]  # rows x longest: 2 x 9 = 18
    assert pack_rows([9, 8, 7, 9], 18, prompts, held) == [[0, 1, 2], [3]]  # 9 + 3 + 2 = 14; + 9 = 23


def test_split_to_count_halves_the_largest_groups():
    assert split_to_count([[0, 1, 2, 3], [4]], 3) == [[0, 1], [2, 3], [4]]
    assert split_to_count([[0], [1, 2, 3]], 2) == [[0], [1, 2, 3]]
    with pytest.raises(ValueError, match="cannot split 2 rows into 3"):
        split_to_count([[0], [1]], 3)
    assert split_to_count([[0, 1, 2, 3, 4]], 2) == [[0, 1, 2], [3, 4]]
    # the cut nearest the middle where both parts fit: rows 0-2 share a prompt, 3-4 another
    same_prompt = lambda group: len({row < 3 for row in group}) == 1  # noqa: E731
    assert split_to_count([[0, 1, 2, 3, 4]], 2, same_prompt) == [[0, 1, 2], [3, 4]]
    assert split_to_count([[3, 4, 0, 1, 2]], 2, same_prompt) == [[3, 4], [0, 1, 2]]
    assert split_to_count([[0, 3, 1, 4]], 2, lambda group: False) == [[0, 3], [1, 4]]  # nothing fits: the middle


def test_packed_micro_batches_are_cut_to_their_longest_row(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    full = batch.input_ids.shape[1]
    parts = micro_batches(batch, 4, 3 * full)
    lengths = batch.attention_mask.sum(-1)
    assert sorted(int(i) for p in parts for i in p.rows) == list(range(len(batch)))
    for p in parts:
        assert len(p.rows) * p.length <= 3 * full and p.length == int(lengths[p.rows].max())
        assert torch.equal(p.batch.input_ids, batch.input_ids[p.rows, : p.length])
        assert torch.equal(p.take(batch.loss_mask), p.batch.loss_mask)
        assert p.batch.loss_mask.sum() == batch.loss_mask[p.rows].sum()  # only padding was cut
    assert min(p.length for p in parts) < full  # the rollout's rows differ in length
    assert len(micro_batches(batch, 4, 3 * full, count=lambda n: n + 2)) == len(parts) + 2


def test_row_count_micro_batches_are_cut_to_their_longest_row(toy_model_dir):
    """Without a token budget: runs of micro_batch_size rows in batch order, each cut to its own
    longest row (padded to the batch's length until 2026-12-07), only padding cut."""
    _, _, batch = _rollout(toy_model_dir)
    full, lengths = batch.input_ids.shape[1], batch.attention_mask.sum(-1).tolist()
    parts = micro_batches(batch, 4, 0)
    assert [p.rows for p in parts] == [slice(s, s + 4) for s in range(0, len(batch), 4)]
    assert [p.length for p in parts] == [max(lengths[s : s + 4]) for s in range(0, len(batch), 4)]
    assert min(p.length for p in parts) < full  # the rollout's runs differ in length
    for p in parts:
        assert torch.equal(p.batch.input_ids, batch.input_ids[p.rows, : p.length])
        assert torch.equal(p.take(batch.loss_mask), p.batch.loss_mask)
        assert p.batch.loss_mask.sum() == batch.loss_mask[p.rows].sum()
        assert not batch.attention_mask[p.rows, p.length :].any()


@pytest.mark.portability
def test_cutting_a_run_of_rows_changes_no_logprob_beyond_round_off(toy_model_dir):
    """A run of rows cut to its longest row against the same rows at the batch's padded length
    (what the row-count path ran before): trailing padding is masked out of attention and of the
    loss, so every real position's logprob agrees within the bound of another summation order."""
    from heron.trainer.logprobs import forward_logprobs

    _, _, batch = _rollout(toy_model_dir)
    trainer = _trainer(toy_model_dir, micro_batch_size=4)
    shortest = min(micro_batches(batch, 4, 0), key=lambda p: p.length)
    padded = batch.select(shortest.rows)
    assert shortest.length < padded.input_ids.shape[1]
    with torch.no_grad():
        cut = forward_logprobs(trainer.model, shortest.batch.input_ids, shortest.batch.attention_mask, 1.0)[0]
        whole = forward_logprobs(trainer.model, padded.input_ids, padded.attention_mask, 1.0)[0]
    mask = shortest.batch.loss_mask.bool()
    n = reduction_length(trainer.model.config, tokens=padded.input_ids.numel())
    for got, want in zip(cut[mask].tolist(), whole[:, : shortest.length - 1][mask].tolist()):
        assert_sums_close(got, want, n=n, magnitude=abs(want) + math.log(trainer.model.config.vocab_size), what="logprob")


def test_take_cuts_every_per_position_tensor_with_its_rows():
    """[B, L] tensors to the length, [B, L-1] ones (token-level advantages, returns, old values,
    mismatch weights) to length - 1, [B] ones indexed only."""
    from heron.trainer.batch import TrainBatch

    per_position = lambda offset: torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4) + offset  # [B, L-1]
    batch = TrainBatch(
        rollout_id=1, policy_version=1, sample_ids=["a", "b", "c"], input_ids=torch.arange(15).reshape(3, 5),
        attention_mask=torch.ones(3, 5, dtype=torch.long), loss_mask=per_position(0), advantages=per_position(100),
        old_logprobs=per_position(200), mismatch_weights=per_position(300), returns=per_position(400),
        old_values=per_position(500),
    )
    part = batch.take([2, 0], 3)
    assert part.sample_ids == ["c", "a"] and torch.equal(part.input_ids, torch.tensor([[10, 11, 12], [0, 1, 2]]))
    assert part.attention_mask.shape == (2, 3)
    for name, offset in (("loss_mask", 0), ("advantages", 100), ("old_logprobs", 200), ("mismatch_weights", 300),
                         ("returns", 400), ("old_values", 500)):
        assert torch.equal(getattr(part, name), torch.tensor([[8.0, 9.0], [0.0, 1.0]]) + offset), name
    sequence_level = replace(batch, advantages=torch.tensor([1.0, 2.0, 3.0]), returns=None, old_values=None)
    assert torch.equal(sequence_level.take([2, 0], 3).advantages, torch.tensor([3.0, 1.0]))
    assert sequence_level.take([1], 2).returns is None


@pytest.mark.portability
def test_token_level_advantages_pack_like_rows(toy_model_dir):
    """algo.advantage=gae gives [B, L-1] advantages: packed micro-batches cut them with their rows
    (they crashed the loss with a shape mismatch before) and give the row-count update."""
    _, _, batch = _rollout(toy_model_dir)
    batch = replace(batch, advantages=batch.advantages[:, None] * batch.loss_mask * torch.linspace(0.5, 1.5, batch.loss_mask.shape[1]))
    rows = _trainer(toy_model_dir, micro_batch_size=4)
    packed = _trainer(toy_model_dir, max_tokens_per_micro_batch=3 * batch.input_ids.shape[1])
    initial = {k: v.clone() for k, v in rows.model.state_dict().items()}
    m_rows, m_packed = rows.train(batch), packed.train(batch)
    n = reduction_length(rows.model.config, tokens=batch.input_ids.numel())
    assert_updates_close(packed.model.state_dict(), rows.model.state_dict(), initial, n=n, steps=1)
    assert_sums_close(m_packed["pg_loss"], m_rows["pg_loss"], n=n, magnitude=abs(m_rows["pg_loss"]) + 1.0, what="pg_loss")


def _trainer(model_dir, loss_agg="token-mean", entropy_coef=0.0, **train_kw) -> PolicyTrainer:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    objective = PolicyObjective(AlgoConfig(loss_agg=loss_agg, entropy_coef=entropy_coef), max_response_tokens=MAX_NEW_TOKENS)
    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return PolicyTrainer(model, TrainConfig(lr=1e-3, eps=1.0, **train_kw), objective, total_steps=10)


@pytest.mark.portability
@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
def test_packed_update_equals_the_row_count_update(toy_model_dir, loss_agg):
    _, _, batch = _rollout(toy_model_dir)
    rows = _trainer(toy_model_dir, loss_agg, micro_batch_size=4)
    packed = _trainer(toy_model_dir, loss_agg, max_tokens_per_micro_batch=3 * batch.input_ids.shape[1])
    assert_same_update(packed, rows, batch)


def assert_same_update(actual: PolicyTrainer, expected: PolicyTrainer, batch) -> None:
    """Two trainers from the same weights, whose train steps differ only in summation order, give
    the same update and metrics on ``batch`` within the derived round-off (tests/tolerance.py)."""
    initial = {k: v.clone() for k, v in expected.model.state_dict().items()}
    m_expected, m_actual = expected.train(batch), actual.train(batch)
    n = reduction_length(expected.model.config, tokens=batch.input_ids.numel())
    assert_updates_close(actual.model.state_dict(), expected.model.state_dict(), initial, n=n, steps=1)
    log_vocab = math.log(expected.model.config.vocab_size)
    for key in ("loss", "pg_loss", "entropy", "policy_drift_kl"):
        assert_sums_close(m_actual[key], m_expected[key], n=n, magnitude=abs(m_expected[key]) + log_vocab, what=key)
    assert_sums_close(m_actual["grad_norm"], m_expected["grad_norm"], n=n, magnitude=m_expected["grad_norm"], what="grad_norm")


@pytest.mark.portability
def test_packed_no_grad_logprobs_land_in_their_rows(toy_model_dir):
    """The separate pi_old / reference forward (compute_logprobs) puts every packed row's
    logprobs back in its place of the [B, L-1] batch tensor, zero past the loss tokens."""
    _, _, batch = _rollout(toy_model_dir)
    rows = _trainer(toy_model_dir, micro_batch_size=4)
    packed = _trainer(toy_model_dir, max_tokens_per_micro_batch=3 * batch.input_ids.shape[1])
    expected, actual = rows.compute_logprobs(batch), packed.compute_logprobs(batch)
    assert len(packed._micro_batches(batch)) > 1 and bool((actual[batch.loss_mask == 0] == 0).all())
    _assert_logprobs_close(actual, expected, rows.model, batch)


def test_packing_with_the_same_grouping_is_bit_identical(toy_model_dir):
    """A budget that holds the whole mini-batch at its padded length: one micro-batch, the rows
    in batch order, the same length -- the same computation as micro_batch_size = all rows."""
    _, _, batch = _rollout(toy_model_dir)
    rows = _trainer(toy_model_dir, micro_batch_size=len(batch), steps_per_rollout=1)
    packed = _trainer(toy_model_dir, max_tokens_per_micro_batch=batch.input_ids.numel(), steps_per_rollout=1)
    assert rows.train(batch) == packed.train(batch)
    for (name, a), b in zip(rows.model.state_dict().items(), packed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(rows.compute_logprobs(batch), packed.compute_logprobs(batch))
