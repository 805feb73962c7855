"""Rows without an advantage leave the forward (train.skip_zero_advantage, issue 14 item 2): which
rows by hand-worked examples, and on a real toy rollout whose groups half have equal rewards the
step equals the every-row step -- within the derived round-off bound (tests/tolerance.py: only the
rows per matmul change the order of the float sums) -- while the model sees only the other rows.
Where the loss has a term without the advantage, every row trains."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from heron.algo.catalog import LOSS_AGGREGATIONS
from heron.algo.policy_loss import ppo_clip_loss
from heron.config.algo import AlgoConfig
from heron.config.off_policy import OffPolicyConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective, SFTObjective
from heron.trainer.packing import micro_batches, trained_rows
from heron.trainer.policy_trainer import PolicyTrainer
from heron.trainer.zero_advantage import rows_with_gradient
from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length
from tests.unit.test_trainer import _rollout

MAX_NEW_TOKENS = 6  # _rollout's rollout.max_new_tokens


def test_rows_with_gradient_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])  # [B=4, L-1=3]
    assert rows_with_gradient(torch.tensor([0.0, 1.5, 2.0, -0.5]), mask) == [1, 3]  # row 2 has no loss token
    assert rows_with_gradient(torch.tensor([0.0, float("nan"), 0.0, 0.0]), mask) == [1]  # NaN reaches the guard
    # none has an advantage: the row with the fewest loss tokens keeps the step's (zero) gradient
    assert rows_with_gradient(torch.zeros(4), mask) == [2]
    per_token = torch.zeros(4, 3)
    per_token[0, 2] = 1.0  # off row 0's loss positions: no gradient
    per_token[3, 1] = -0.25
    assert rows_with_gradient(per_token, mask) == [3]


def test_micro_batches_of_some_rows_fill_up_to_the_ranks_count(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)  # 16 rows
    assert trained_rows(micro_batches(batch, 4, 0, rows=[1, 5, 6, 9, 15])) == [1, 5, 6, 9, 15]
    assert [len(p.batch) for p in micro_batches(batch, 4, 0, rows=[1, 5, 6, 9, 15])] == [4, 1]
    # every row: the very micro-batches of the plain path (slices of the collated length)
    plain, listed = micro_batches(batch, 4, 0), micro_batches(batch, 4, 0, rows=list(range(len(batch))))
    assert [p.rows for p in listed] == [p.rows for p in plain] and all(isinstance(p.rows, slice) for p in listed)
    # another rank runs 3 forwards: two rows cannot make 3 micro-batches, a left-out row joins
    parts = micro_batches(batch, 4, 0, count=lambda n: 3, rows=[7, 8])
    assert len(parts) == 3 and trained_rows(parts) == [0, 7, 8]
    packed = micro_batches(batch, 4, 2 * batch.input_ids.shape[1], rows=[2, 3, 11])
    assert trained_rows(packed) == [2, 3, 11] and len(packed) == 2


def _half_equal_groups(model_dir):
    """The toy rollout (4 prompts x 4 samples) with groups 1 and 3 all-equal: advantage 0."""
    _, _, batch = _rollout(model_dir)
    advantages = batch.advantages.clone()
    advantages[4:8] = 0.0
    advantages[12:16] = 0.0
    assert bool((advantages[:4] != 0).any() and (advantages[8:12] != 0).any())
    return replace(batch, advantages=advantages)


def _trainer(model_dir, algo: AlgoConfig | None = None, policy_loss=None, **train_kw) -> PolicyTrainer:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    objective = PolicyObjective(algo or AlgoConfig(), policy_loss=policy_loss, max_response_tokens=MAX_NEW_TOKENS)
    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3);
    # one padded row per sample: _rows_forwarded counts samples by the forward's batch dimension
    train_kw = {"share_prompts": False, **train_kw}
    return PolicyTrainer(model, TrainConfig(lr=1e-3, eps=1.0, micro_batch_size=4, **train_kw), objective, total_steps=10)


def _rows_forwarded(trainer: PolicyTrainer, batch) -> tuple[dict, int]:
    rows = []
    hook = trainer.model.register_forward_hook(lambda _m, args, kwargs, _out: rows.append(kwargs["input_ids"].shape[0]),
                                               with_kwargs=True)
    try:
        return trainer.train(batch), sum(rows)
    finally:
        hook.remove()


@pytest.mark.portability
@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("max_tokens", [0, 40])
def test_skipping_zero_advantage_rows_gives_the_every_row_step(toy_model_dir, loss_agg, max_tokens):
    batch = _half_equal_groups(toy_model_dir)
    algo = AlgoConfig(loss_agg=loss_agg)
    every = _trainer(toy_model_dir, algo, skip_zero_advantage=False, max_tokens_per_micro_batch=max_tokens)
    skipping = _trainer(toy_model_dir, algo, max_tokens_per_micro_batch=max_tokens)
    initial = {k: v.clone() for k, v in every.model.state_dict().items()}
    (m_every, rows_every), (m_skip, rows_skip) = _rows_forwarded(every, batch), _rows_forwarded(skipping, batch)
    assert (rows_every, rows_skip) == (16, 8)
    assert m_skip["zero_advantage_skipped"] == 0.5 and "zero_advantage_skipped" not in m_every
    n = reduction_length(every.model.config, tokens=batch.input_ids.numel())
    assert_updates_close(skipping.model.state_dict(), every.model.state_dict(), initial, n=n, steps=1)
    for key in ("loss", "pg_loss"):
        magnitude = abs(m_every[key]) + math.log(every.model.config.vocab_size)
        assert_sums_close(m_skip[key], m_every[key], n=n, magnitude=magnitude, what=key)
    assert_sums_close(m_skip["grad_norm"], m_every["grad_norm"], n=n, magnitude=m_every["grad_norm"], what="grad_norm")


def test_entropy_is_the_mean_over_the_trained_rows(toy_model_dir):
    """The diagnostics' normaliser is the trained rows': entropy stays a mean per token, that of
    the rows with an advantage (the every-row run measured on those rows alone)."""
    batch = _half_equal_groups(toy_model_dir)
    live = batch.take([0, 1, 2, 3, 8, 9, 10, 11], batch.input_ids.shape[1])
    m_skip = _trainer(toy_model_dir).train(batch)
    m_live = _trainer(toy_model_dir, skip_zero_advantage=False).train(live)
    n = reduction_length(AutoModelForCausalLM.from_pretrained(toy_model_dir).config, tokens=batch.input_ids.numel())
    assert_sums_close(m_skip["entropy"], m_live["entropy"], n=n, magnitude=m_live["entropy"] + 1.0, what="entropy")


def test_all_zero_advantages_still_take_the_optimizer_step(toy_model_dir):
    """No row has an advantage: one row still runs so AdamW steps on a zero gradient as before
    (weight decay moves the weights the same way)."""
    batch = replace(_half_equal_groups(toy_model_dir), advantages=torch.zeros(16))
    every = _trainer(toy_model_dir, skip_zero_advantage=False, weight_decay=0.1)
    skipping = _trainer(toy_model_dir, weight_decay=0.1)
    (_, rows_every), (m_skip, rows_skip) = _rows_forwarded(every, batch), _rows_forwarded(skipping, batch)
    assert (rows_every, rows_skip) == (16, 1) and m_skip["zero_advantage_skipped"] == 15 / 16
    for name, value in every.model.state_dict().items():
        assert torch.equal(skipping.model.state_dict()[name], value), name


@pytest.mark.parametrize("objective_kw", [
    {"algo": AlgoConfig(entropy_coef=0.01)},  # the entropy bonus has a gradient on every row
    {"policy_loss": ppo_clip_loss},  # a hooks.policy_loss: the trainer cannot tell
])
def test_a_loss_with_terms_beyond_the_advantage_trains_every_row(toy_model_dir, objective_kw):
    trainer = _trainer(toy_model_dir, **objective_kw)
    metrics, rows = _rows_forwarded(trainer, _half_equal_groups(toy_model_dir))
    assert rows == 16 and "zero_advantage_skipped" not in metrics


def test_objectives_say_whether_zero_advantage_rows_have_a_gradient():
    assert PolicyObjective(AlgoConfig()).zero_advantage_idle
    assert not PolicyObjective(AlgoConfig(kl_coef=0.1)).zero_advantage_idle  # KL in the loss
    assert PolicyObjective(AlgoConfig(kl_coef=0.1, kl_in_reward=True, kl_estimator="k1")).zero_advantage_idle
    assert not SFTObjective().zero_advantage_idle


@pytest.mark.portability
@pytest.mark.parametrize("steps, off_policy", [(2, "none"), (1, "tis"), (1, "mis")])
def test_the_pi_old_forward_skips_them_too(toy_model_dir, steps, off_policy):
    """The separate no-grad pi_old forward (two steps per rollout, or a mismatch correction) runs
    on the rows with an advantage only (8 of 16), each step on its mini-batch's; the update and
    the engine-mismatch metrics (over the rows computed) equal the every-row run's within round-off."""
    batch = _half_equal_groups(toy_model_dir)
    algo = AlgoConfig(off_policy=OffPolicyConfig(mode=off_policy))
    every = _trainer(toy_model_dir, algo, skip_zero_advantage=False, steps_per_rollout=steps)
    skipping = _trainer(toy_model_dir, algo, steps_per_rollout=steps)
    initial = {k: v.clone() for k, v in every.model.state_dict().items()}
    (m_every, rows_every), (m_skip, rows_skip) = _rows_forwarded(every, batch), _rows_forwarded(skipping, batch)
    assert (rows_every, rows_skip) == (16 + 16, 8 + 8)
    assert m_skip["old_logprobs_recomputed"] == m_every["old_logprobs_recomputed"] == 1.0
    n = reduction_length(every.model.config, tokens=batch.input_ids.numel())
    assert_updates_close(skipping.model.state_dict(), every.model.state_dict(), initial, n=n, steps=steps)
    live = batch.take([0, 1, 2, 3, 8, 9, 10, 11], batch.input_ids.shape[1])
    m_live = _trainer(toy_model_dir, algo, skip_zero_advantage=False, steps_per_rollout=steps).train(live)
    mismatch = {"none": [], "tis": ["mismatch/truncated_fraction"], "mis": ["mismatch/masked_fraction"]}[off_policy]
    for key in ("engine_logprob_abs_diff_mean", "engine_logprob_abs_diff_max", *mismatch):
        assert_sums_close(m_skip[key], m_live[key], n=n, magnitude=math.log(every.model.config.vocab_size), what=key)
