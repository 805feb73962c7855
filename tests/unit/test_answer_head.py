"""The output head at the answer positions alone (heron.trainer.lm_head_chunks, ``scored``): the
logprobs and entropies there, and the gradients of anything computed from them, equal the whole
head's within the round-off of another summation order (tests/tolerance.py, rule 2); every other
position is exactly 0 and no [B, L, V] tensor is ever made. Padded and shared-prompt layouts,
whole and chunked, under grad and without; in the trainer (the update equals the whole head's);
and the model types it is used for, each checked against its whole head."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3ForCausalLM

from heron.lora import AdaptersDisabled, apply_lora
from heron.config.lora import LoraConfig
from heron.trainer.lm_head_chunks import PLAIN_HEAD_MODEL_TYPES, output_head, plain_head_reason
from heron.trainer.logprobs import forward_logprobs
from heron.trainer.model_flops import forward_cost
from heron.trainer.shared_prompts import plan
from tests.tolerance import assert_logprobs_close, gamma, reduction_length
from tests.unit.test_logprobs_chunked import _LargestTensor, _wide_vocab_model
from tests.unit.test_packing import _trainer, assert_same_update
from tests.unit.test_shared_prompts import _grouped_batch
from tests.unit.test_trainer import _rollout

# a tiny config every listed model type accepts (the MoE ones read the expert sizes)
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
            num_local_experts=4, num_experts_per_tok=2)


def _run(model, input_ids, mask, answer, *, scored, layout=None, chunk_size=0):
    """(logprobs, entropy, every parameter's gradient) of a loss read at the answer positions."""
    model.zero_grad(set_to_none=True)
    logprobs, entropy = forward_logprobs(model, input_ids, mask, 0.8, with_entropy=True, chunk_size=chunk_size,
                                         layout=layout, scored=answer.bool() if scored else None)
    ((logprobs + 0.1 * entropy) * answer).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logprobs.detach(), entropy.detach(), grads


def _assert_same(actual, expected, answer, config, tokens):
    """Values at the answer positions and the gradients within rule 2; exactly 0 elsewhere."""
    n = reduction_length(config, tokens=tokens)
    log_vocab = math.log(config.vocab_size)
    assert_logprobs_close(actual[0] * answer, expected[0] * answer, n=n, log_vocab=log_vocab)
    assert_logprobs_close(actual[1] * answer, expected[1] * answer, n=n, log_vocab=log_vocab)
    assert bool((actual[0][answer == 0] == 0).all()) and bool((actual[1][answer == 0] == 0).all())
    # norm-wise (rule 2): each gradient is a chain of <= n sums; both runs' round-off adds
    bound = 2 * gamma(n) * expected[2].double().norm() * (1 + log_vocab)
    assert (actual[2].double() - expected[2].double()).norm() <= bound
    assert expected[2].norm() > 0


@pytest.mark.portability
@pytest.mark.parametrize("chunk_size", [0, 3])
@pytest.mark.parametrize("shared", [False, True])
def test_answer_positions_equal_the_whole_head(chunk_size, shared):
    model = _wide_vocab_model(vocab_size=4000)
    input_ids, mask, prompts, answer = _grouped_batch(model.config.vocab_size)
    layout = plan(input_ids, mask, prompts, forward_cost(model)) if shared else None
    assert (layout is not None) == shared
    whole = _run(model, input_ids, mask, answer, scored=False, layout=layout)
    answers = _run(model, input_ids, mask, answer, scored=True, layout=layout, chunk_size=chunk_size)
    _assert_same(answers, whole, answer, model.config, input_ids.numel())


def test_no_logits_are_made_at_the_prompt_and_padding_positions():
    """The largest tensor of a forward + backward holds the logits of the answer positions (N x V),
    not of every position (B x L x V): the head never ran anywhere else."""
    model = _wide_vocab_model(vocab_size=4000)
    input_ids, mask, _, answer = _grouped_batch(model.config.vocab_size)
    num_answers = int(answer.sum())
    assert 2 * num_answers <= input_ids.numel()  # half the positions are prompt and padding
    with _LargestTensor() as largest:
        _run(model, input_ids, mask, answer, scored=True)
    weights = model.config.vocab_size * model.config.hidden_size  # the embedding, the head, their gradients
    assert largest.numel == max(num_answers * model.config.vocab_size, weights)


def test_without_grad_and_with_nothing_to_score():
    model = _wide_vocab_model(vocab_size=500)
    input_ids, mask, _, answer = _grouped_batch(model.config.vocab_size)
    with torch.no_grad():
        whole, _ = forward_logprobs(model, input_ids, mask)
        answers, none = forward_logprobs(model, input_ids, mask, scored=answer.bool())
    assert none is None and not answers.requires_grad
    n = reduction_length(model.config, input_ids.numel())
    assert_logprobs_close(answers * answer, whole * answer, n=n, log_vocab=math.log(500))
    assert bool((answers[answer == 0] == 0).all())
    nothing, _ = forward_logprobs(model, input_ids, mask, scored=torch.zeros_like(answer, dtype=torch.bool))
    assert nothing.shape == whole.shape and not bool(nothing.any())
    nothing.sum().backward()  # a graph without a single scored position still back-propagates


@pytest.mark.parametrize("model_type", PLAIN_HEAD_MODEL_TYPES)
def test_every_listed_model_type_returns_its_heads_output(model_type):
    """Each type the trainer scores the answers of returns the head's output as its logits (the
    forward would raise otherwise) and gives the whole head's values there."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **TINY)).float()
    assert plain_head_reason(model) is None
    input_ids, mask, _, answer = _grouped_batch(TINY["vocab_size"])
    whole = _run(model, input_ids, mask, answer, scored=False)
    answers = _run(model, input_ids, mask, answer, scored=True)
    _assert_same(answers, whole, answer, model.config, input_ids.numel())


@pytest.mark.parametrize("model_type", ["gemma2", "cohere", "granite"])
def test_models_that_change_their_logits_keep_the_whole_head(model_type):
    """Soft-capped or scaled logits: not listed, so the trainer keeps the whole head; scoring
    some positions of such a model anyway fails in one line instead of returning wrong values."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **TINY, final_logit_softcapping=30.0, logit_scale=0.5, logits_scaling=2.0)
    model = AutoModelForCausalLM.from_config(config).float()
    assert model_type in plain_head_reason(model)
    input_ids, mask, _, answer = _grouped_batch(TINY["vocab_size"])
    with pytest.raises(RuntimeError, match="does not return its lm_head's output .* pass scored=None"):
        forward_logprobs(model, input_ids, mask, scored=answer.bool())
    assert "forward" not in output_head(model).__dict__


class OwnForward(Qwen3ForCausalLM):
    """A Qwen3 class whose forward is not transformers' own (as remote code's would be)."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)


def test_a_model_class_of_its_own_keeps_the_whole_head():
    """A listed model type whose forward is not transformers' (remote code may do anything to
    its logits) keeps the whole head; wrappers (DDP's .module, PEFT) are seen through."""
    config = AutoConfig.for_model("qwen3", **TINY)
    assert "OwnForward.forward is not transformers' own" in plain_head_reason(OwnForward(config))
    model = Qwen3ForCausalLM(config)
    wrapped = torch.nn.Module()
    wrapped.module = model  # DDP's layout
    assert plain_head_reason(wrapped) is None
    lora = apply_lora(model, LoraConfig(enabled=True, rank=2, alpha=4.0))
    assert plain_head_reason(lora) is None
    assert output_head(AdaptersDisabled(lora)) is output_head(lora)  # a LoRA policy's KL reference runs it too


@pytest.mark.portability
def test_trainer_update_equals_the_whole_heads(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    answers, whole = _trainer(toy_model_dir, share_prompts=False), _trainer(toy_model_dir, share_prompts=False)
    assert answers._answers_only
    whole._answers_only = False  # the trainer with the head at every position, as before
    assert_same_update(answers, whole, batch)
    expected, actual = whole.compute_logprobs(batch), answers.compute_logprobs(batch)
    answer = batch.answer_positions()
    assert bool((actual[~answer] == 0).all())
    n = reduction_length(whole.model.config, tokens=batch.input_ids.numel())
    assert_logprobs_close(actual[answer], expected[answer], n=n, log_vocab=math.log(whole.model.config.vocab_size))
