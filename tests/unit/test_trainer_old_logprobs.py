"""One optimizer step on-policy takes pi_old from the training forward (issue 14, item 2): the
separate old-logprob forward really is skipped (forward calls counted on the real model), it
still runs where it is needed, and the skip changes neither the loss, the gradients nor the
updated parameters.

Equivalence: with the skip, pi_old is the training forward's logprobs, detached; with the
recompute it is a no-grad forward of the same weights over the same micro-batch rows (same
micro-batch grouping, same padded length). Both evaluate the same operations on the same
inputs, so on one machine they give the same bits (tests/tolerance.py, rule 1) and the ratio
exp(logp - pi_old) is exactly 1 either way: loss, gradients and parameters are compared
bit for bit. (Were a kernel to pick another summation order without autograd, the difference
would be the logprob round-off of rule 2, and this test would say so.)
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.algo.assign import assign_advantages
from heron.config.algo import AlgoConfig
from heron.config.off_policy import OffPolicyConfig
from heron.config.rollout import RolloutConfig
from heron.config.train import TrainConfig
from heron.records import Prompt
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
from heron.trainer.batch import TrainBatch, collate
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

PROMPTS = [Prompt(i, t, l) for i, (t, l) in enumerate([("12+30=", "42"), ("7+5=", "12"), ("100+23=", "123"), ("1+1=", "2")])]
NUM_ROWS, MICRO = 16, 4  # 4 prompts x 4 samples; 4 micro-batches per optimizer step


@pytest.fixture(scope="module")
def batch(toy_model_dir) -> TrainBatch:
    """A real rollout of the toy model (engine logprobs), with varied advantages."""
    tok = AutoTokenizer.from_pretrained(toy_model_dir)
    engine = EmbeddedEngine.from_pretrained(toy_model_dir, pad_token_id=tok.pad_token_id)
    cfg = RolloutConfig(batch_size=4, samples_per_prompt=4, max_new_tokens=6)
    rollout = RolloutGenerator(engine, PromptFormatter(tok), cfg, seed=0).generate(0, PROMPTS)
    g = torch.Generator().manual_seed(0)
    for s in rollout.samples:
        s.reward = float(torch.rand((), generator=g) > 0.5)
    assign_advantages(rollout, ADVANTAGE_ESTIMATORS["grpo"])
    batch = collate(rollout.samples, tok.pad_token_id)
    assert len(batch) == NUM_ROWS and batch.advantages.abs().sum() > 0
    return batch


def _trainer(model_dir, algo: AlgoConfig | None = None, **train_kw) -> PolicyTrainer:
    algo = algo or AlgoConfig()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32) if algo.kl_coef > 0 else None
    cfg = TrainConfig(lr=1e-3, micro_batch_size=MICRO, **train_kw)
    return PolicyTrainer(model, cfg, PolicyObjective(algo), total_steps=4, reference=reference)


def _train(trainer: PolicyTrainer, batch: TrainBatch):
    """(metrics, gradients at the optimizer step, parameters after it, policy forward calls)."""
    calls, grads = [], {}
    hook = trainer.model.register_forward_hook(lambda *_: calls.append(1))

    def keep_grads(*_):
        grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})

    step_hook = trainer.optimizer.register_step_pre_hook(keep_grads)
    try:
        metrics = trainer.train(_copy(batch))
    finally:
        hook.remove()
        step_hook.remove()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return metrics, grads, params, len(calls)


def _copy(batch: TrainBatch) -> TrainBatch:
    """train() replaces the batch's old logprobs when it recomputes them: each run gets its own."""
    return replace(batch, old_logprobs=batch.old_logprobs.clone())


def test_one_step_on_policy_runs_no_old_logprob_forward(toy_model_dir, batch):
    metrics, _, _, forwards = _train(_trainer(toy_model_dir), batch)
    assert forwards == NUM_ROWS // MICRO  # the training forwards only
    assert metrics["old_logprobs_recomputed"] == 0.0


@pytest.mark.parametrize(
    "algo,train_kw,training_forwards",
    [
        (None, {"steps_per_rollout": 2}, NUM_ROWS // MICRO),  # 2 steps x 2 micro-batches
        (AlgoConfig(off_policy=OffPolicyConfig(mode="tis")), {}, NUM_ROWS // MICRO),
        (None, {"old_logprobs_forward": "always"}, NUM_ROWS // MICRO),
    ],
    ids=["several-steps", "tis", "always"],
)
def test_the_old_logprob_forward_runs_where_it_is_needed(toy_model_dir, batch, algo, train_kw, training_forwards):
    metrics, _, _, forwards = _train(_trainer(toy_model_dir, algo, **train_kw), batch)
    assert forwards == training_forwards + NUM_ROWS // MICRO  # plus one no-grad pass over every micro-batch
    assert metrics["old_logprobs_recomputed"] == 1.0


def test_without_recompute_the_engine_logprobs_are_pi_old(toy_model_dir, batch):
    metrics, _, _, forwards = _train(_trainer(toy_model_dir, recompute_old_logprobs=False), batch)
    assert forwards == NUM_ROWS // MICRO
    assert metrics["old_logprobs_recomputed"] == 0.0


@pytest.mark.portability
@pytest.mark.parametrize(
    "algo,stale",
    [
        (AlgoConfig(), False),
        (AlgoConfig(), True),
        (AlgoConfig(loss="gspo", loss_agg="seq-mean-token-mean"), False),
        (AlgoConfig(loss="cispo"), False),
        (AlgoConfig(clip_ratio_c=3.0, kl_coef=0.1, entropy_coef=0.01), False),
    ],
    ids=["ppo_clip", "ppo_clip-stale-samples", "gspo", "cispo", "dual_clip-kl-entropy"],
)
def test_the_skip_gives_the_recompute_update_bit_for_bit(toy_model_dir, batch, algo, stale):
    if stale:  # async: sampled by an older policy version than the trainer's
        batch = replace(batch, policy_version=-1)
    skipping = _trainer(toy_model_dir, algo)
    m_skip, g_skip, p_skip, n_skip = _train(skipping, batch)
    m_full, g_full, p_full, n_full = _train(_trainer(toy_model_dir, algo, old_logprobs_forward="always"), batch)
    assert (n_skip, n_full) == (NUM_ROWS // MICRO, 2 * NUM_ROWS // MICRO)
    assert m_skip.pop("old_logprobs_recomputed") == 0.0 and m_full.pop("old_logprobs_recomputed") == 1.0
    # the recompute is one more forward of every row (heron.trainer.model_flops; float32 sums: rel 1e-6)
    recompute = float(skipping.flops.forward(batch.attention_mask.sum(dim=-1)))
    assert m_full.pop("model_flops") == pytest.approx(m_skip.pop("model_flops") + recompute, rel=1e-6)
    assert m_skip == m_full
    assert m_skip["pg_loss"] != 0.0 and m_skip["grad_norm"] > 0
    assert g_skip.keys() == g_full.keys() and g_skip
    for name in g_full:
        assert torch.equal(g_skip[name], g_full[name]), name
    initial = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32).state_dict()
    assert any(not torch.equal(p_full[n], initial[n]) for n in p_full)  # the step moved the weights
    for name in p_full:
        assert torch.equal(p_skip[name], p_full[name]), name
