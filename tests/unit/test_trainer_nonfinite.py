"""A non-finite loss or grad norm never reaches the weights (issue 9, item 2.7): the trainer
stops with one line before the optimizer step (``train.on_nonfinite=error``), or zeroes the
gradients, skips the step (and its LR-schedule step) and counts it (``skip``)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from heron.algo.policy_loss import PolicyLossOutput
from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.trainer.batch import TrainBatch
from heron.trainer.nonfinite import NonFiniteError
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

NUM_ROWS, LENGTH = 4, 10


def _trainer(model_dir, policy_loss=None, **train_kw):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    kw = dict(lr=1e-3, micro_batch_size=2, recompute_old_logprobs=False, warmup_steps=2) | train_kw
    objective = PolicyObjective(AlgoConfig(), policy_loss=policy_loss)
    return PolicyTrainer(model, TrainConfig(**kw), objective, total_steps=10)


def _batch(trainer, nan_rows=()) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    loss_mask = torch.zeros(NUM_ROWS, LENGTH - 1)
    loss_mask[:, 3:] = 1.0
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    advantages[list(nan_rows)] = float("nan")
    batch = TrainBatch(
        rollout_id=3, policy_version=0, sample_ids=[f"r3/p{i}/s0" for i in range(NUM_ROWS)],
        input_ids=torch.randint(0, vocab, (NUM_ROWS, LENGTH), generator=g),
        attention_mask=torch.ones(NUM_ROWS, LENGTH, dtype=torch.long),
        loss_mask=loss_mask, advantages=advantages, old_logprobs=torch.zeros(NUM_ROWS, LENGTH - 1),
    )
    batch.old_logprobs = trainer.compute_logprobs(batch)  # fixed, so two trainers see identical inputs
    return batch


def _params(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.named_parameters()}


def _assert_unchanged(trainer, before):
    for name, value in trainer.model.named_parameters():
        assert torch.equal(value, before[name]), name
    assert trainer.optimizer.state == {} or all(not s for s in trainer.optimizer.state.values())


def _nan_grad_loss(logprobs, old_logprobs, advantages, loss_mask, **kw):
    """Finite loss (0), NaN gradient: d sqrt(x)/dx at 0 is inf, times 0 is NaN."""
    loss = torch.sqrt((logprobs * loss_mask).sum() * 0.0)
    zero = torch.zeros(())
    return PolicyLossOutput(loss=loss, clip_fraction=zero, approx_kl=zero, ratio_mean=zero)


def test_a_nan_loss_stops_the_run_before_the_optimizer_step(toy_model_dir):
    trainer = _trainer(toy_model_dir)
    batch = _batch(trainer, nan_rows=[1])
    before = _params(trainer)
    with pytest.raises(NonFiniteError) as e:
        trainer.train(batch)
    message = str(e.value)
    assert "non-finite" in message and "rollout 3" in message and "train.on_nonfinite=skip" in message
    assert "\n" not in message
    _assert_unchanged(trainer, before)
    assert trainer.scheduler.last_epoch == 0


def test_a_nan_grad_norm_under_a_finite_loss_also_stops(toy_model_dir):
    trainer = _trainer(toy_model_dir, policy_loss=_nan_grad_loss)
    before = _params(trainer)
    with pytest.raises(NonFiniteError, match="grad_norm=nan"):
        trainer.train(_batch(trainer))
    _assert_unchanged(trainer, before)


def test_skip_drops_only_the_bad_step_and_counts_it(toy_model_dir):
    """Two mini-batches, the first with a NaN advantage: skipping it must leave exactly the
    update of the good one alone, at the LR of the schedule's first step (warm-up: lr / 2)."""
    skipping = _trainer(toy_model_dir, on_nonfinite="skip", steps_per_rollout=2)
    batch = _batch(skipping, nan_rows=[0])
    metrics = skipping.train(batch)
    assert metrics["nonfinite_skipped"] == 1.0
    reference = _trainer(toy_model_dir, steps_per_rollout=1)
    good = batch.select(slice(2, 4))
    expected = reference.train(good)
    for name, value in skipping.model.named_parameters():
        assert torch.equal(value, dict(reference.model.named_parameters())[name]), name
    assert metrics["lr"] == expected["lr"] == pytest.approx(1e-3 / 2)
    assert expected["nonfinite_skipped"] == 0.0
    # the skipped step's forward and backward ran all the same: model FLOPs of both mini-batches
    ran = float(skipping.flops.training(batch.attention_mask.sum(dim=-1)))
    assert metrics["model_flops"] == pytest.approx(ran, rel=1e-6) and expected["model_flops"] < ran
    counted = ("nonfinite_skipped", "model_flops")
    assert {k: v for k, v in metrics.items() if k not in counted} == {
        k: v for k, v in expected.items() if k not in counted
    }  # metrics are means over the applied steps
    assert skipping.scheduler.last_epoch == reference.scheduler.last_epoch == 1


def test_skip_of_every_step_leaves_the_weights_as_they_were(toy_model_dir):
    trainer = _trainer(toy_model_dir, on_nonfinite="skip", policy_loss=_nan_grad_loss)
    before = _params(trainer)
    metrics = trainer.train(_batch(trainer))
    assert metrics["nonfinite_skipped"] == 1.0
    _assert_unchanged(trainer, before)
    assert all(p.grad is None for p in trainer.model.parameters())
