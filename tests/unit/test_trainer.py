"""The trainer against the engine and against itself: logprob consistency, micro-batching
equivalence, weight push, SFT. Both sides of each comparison compute the same values in another
summation order: bounds from tests/tolerance.py."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.algo.assign import assign_advantages
from heron.config.algo import AlgoConfig
from heron.config.rollout import RolloutConfig
from heron.config.train import TrainConfig
from heron.records import Prompt
from heron.reward.scorer import RewardScorer
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
from heron.trainer.batch import collate
from heron.trainer.objectives import PolicyObjective, SFTObjective
from heron.trainer.policy_trainer import PolicyTrainer
from tests.tolerance import (
    assert_logprobs_close, assert_sums_close, assert_updates_close, logprob_roundoff, reduction_length,
)

PROMPTS = [Prompt(i, t, l) for i, (t, l) in enumerate([("12+30=", "42"), ("7+5=", "12"), ("100+23=", "123"), ("1+1=", "2")])]


def _rollout(model_dir, temperature=1.0, samples_per_prompt=4):
    tok = AutoTokenizer.from_pretrained(model_dir)
    engine = EmbeddedEngine.from_pretrained(model_dir, pad_token_id=tok.pad_token_id)
    cfg = RolloutConfig(batch_size=4, samples_per_prompt=samples_per_prompt, max_new_tokens=6, temperature=temperature)
    gen = RolloutGenerator(engine, PromptFormatter(tok), cfg, seed=0)
    batch = RewardScorer.from_name("exact_match").score(gen.generate(0, PROMPTS))
    # random rewards give non-zero advantages on an untrained model
    g = torch.Generator().manual_seed(0)
    for s in batch.samples:
        s.reward = float(torch.rand((), generator=g) > 0.5)
    assign_advantages(batch, ADVANTAGE_ESTIMATORS["grpo"])
    return tok, engine, collate(batch.samples, tok.pad_token_id)


def _trainer(model_dir, temperature=1.0, **train_kw):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-3, **train_kw)
    return PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=10, temperature=temperature)


def _assert_logprobs_close(actual, expected, model, batch):
    n = reduction_length(model.config, tokens=batch.input_ids.numel())
    assert_logprobs_close(actual, expected, n=n, log_vocab=math.log(model.config.vocab_size))


@pytest.mark.portability
def test_engine_logprobs_equal_trainer_recomputed_logprobs(toy_model_dir):
    for temperature in (1.0, 0.7):
        _, _, batch = _rollout(toy_model_dir, temperature)
        trainer = _trainer(toy_model_dir, temperature)
        recomputed = trainer.compute_logprobs(batch)
        assert batch.loss_mask.sum() > 0
        _assert_logprobs_close(recomputed, batch.old_logprobs, trainer.model, batch)


@pytest.mark.portability
def test_micro_batching_gives_the_full_batch_update(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py,
    # rule 3); at eps=1e-8 round-off in a near-zero gradient becomes an lr-sized step.
    full = _trainer(toy_model_dir, micro_batch_size=16, eps=1.0)
    micro = _trainer(toy_model_dir, micro_batch_size=4, eps=1.0)
    initial = {k: v.clone() for k, v in full.model.state_dict().items()}
    m_full, m_micro = full.train(batch), micro.train(batch)
    n = reduction_length(full.model.config, tokens=batch.input_ids.numel())
    assert_updates_close(micro.model.state_dict(), full.model.state_dict(), initial, n=n, steps=1)
    log_vocab = math.log(full.model.config.vocab_size)
    assert_sums_close(m_micro["loss"], m_full["loss"], n=n, magnitude=abs(m_full["loss"]) + log_vocab, what="loss")
    assert_sums_close(m_micro["grad_norm"], m_full["grad_norm"], n=n, magnitude=m_full["grad_norm"], what="grad_norm")


@pytest.mark.portability
def test_train_changes_weights_returns_metrics_and_push_updates_engine(toy_model_dir):
    tok, engine, batch = _rollout(toy_model_dir)
    trainer = _trainer(toy_model_dir, steps_per_rollout=2, micro_batch_size=4)
    before = {k: v.clone() for k, v in trainer.host_weights().items()}
    roundoff = _logprob_roundoff(trainer.model, batch)  # before train() replaces the engine's logprobs
    metrics = trainer.train(batch)
    assert set(metrics) >= {"loss", "pg_loss", "clip_fraction", "entropy", "grad_norm", "lr", "policy_drift_kl"}
    # the engine sampled with the trainer's weights: only float round-off between the two
    assert 0 <= metrics["engine_logprob_abs_diff_mean"] <= metrics["engine_logprob_abs_diff_max"] <= roundoff
    assert trainer.version == 1
    assert any(not torch.equal(before[k], v) for k, v in trainer.host_weights().items())
    engine.load_weights(trainer.weights())
    assert engine.policy_version == 1
    for k, v in engine.model.state_dict().items():
        assert torch.equal(v, trainer.host_weights()[k]), k
    # after the push the engine's logprobs are the trainer's again
    _assert_logprobs_close(trainer.compute_logprobs(batch), _rescore(engine, batch), trainer.model, batch)


def test_logprob_mismatch_metric_sees_a_stale_engine(toy_model_dir):
    """Engine logprobs from other weights than the trainer's show up as a large mismatch."""
    _, _, batch = _rollout(toy_model_dir)
    trainer = _trainer(toy_model_dir)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer._publish_weights()
    roundoff = _logprob_roundoff(trainer.model, batch)
    metrics = trainer.train(batch)
    assert metrics["engine_logprob_abs_diff_max"] > 10 * roundoff
    assert 0 < metrics["engine_logprob_abs_diff_mean"] <= metrics["engine_logprob_abs_diff_max"]


def _logprob_roundoff(model, batch) -> float:
    """The largest engine/trainer logprob gap round-off explains on ``batch`` (tests/tolerance.py)."""
    max_abs = float((batch.old_logprobs.abs() * batch.loss_mask).max())
    return logprob_roundoff(model.config, batch.input_ids.numel(), max_abs)


def _rescore(engine, batch):
    from heron.trainer.logprobs import forward_logprobs

    with torch.no_grad():
        return forward_logprobs(engine.model, batch.input_ids, batch.attention_mask)[0] * batch.loss_mask


def test_kl_to_reference_is_zero_before_training_and_positive_after(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    ref = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    trainer = PolicyTrainer(model, TrainConfig(lr=1e-2), PolicyObjective(AlgoConfig(kl_coef=0.1)), total_steps=4, reference=ref)
    first = trainer.train(batch)
    second = trainer.train(batch)
    assert first["kl"] < 1e-10
    assert second["kl"] > 1e-6


def test_sft_objective_lowers_the_loss(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    trainer = PolicyTrainer(model, TrainConfig(lr=3e-3, recompute_old_logprobs=False, micro_batch_size=16), SFTObjective(), total_steps=20)
    losses = [trainer.train(batch)["loss"] for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
