"""Logprobs and entropies chunked over positions (train.logprob_chunk_size): the same values and
gradients as the whole [B, T, V] log-softmax, bit for bit -- every operation after the model acts
on one position's V logits alone, so chunking positions changes no summation (tests/tolerance.py,
rule 1) -- with a large vocabulary, under grad (activation checkpointing) and without."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from heron.trainer.logprobs import forward_logprobs, token_logprobs
from tests.unit.test_packing import _trainer
from tests.unit.test_trainer import _rollout


def _wide_vocab_model(vocab_size: int = 32_000) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    return Qwen3ForCausalLM(config).float()


def _loss_and_grads(model, input_ids, mask, chunk_size, temperature):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = forward_logprobs(model, input_ids, mask, temperature, with_entropy=True, chunk_size=chunk_size)
    (logprobs.sum() + 0.1 * entropy.sum()).backward()
    return logprobs.detach(), entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.portability
@pytest.mark.parametrize("chunk_size", [1, 5, 16])
def test_chunked_logprobs_entropy_and_gradients_equal_the_full_ones(chunk_size):
    model = _wide_vocab_model()
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, model.config.vocab_size, (3, 21), generator=g)  # [B, L]
    mask = torch.ones_like(input_ids)
    mask[1, 15:] = 0  # a padded row
    for temperature in (1.0, 0.7):
        full = _loss_and_grads(model, input_ids, mask, 0, temperature)
        chunked = _loss_and_grads(model, input_ids, mask, chunk_size, temperature)
        assert torch.equal(full[0], chunked[0]) and torch.equal(full[1], chunked[1])
        for name, grad in full[2].items():
            assert torch.equal(grad, chunked[2][name]), name


def test_chunked_logprobs_without_grad_and_without_entropy():
    logits = torch.randn(2, 10, 50, generator=torch.Generator().manual_seed(0))  # [B, T + 1, V]
    targets = torch.randint(0, 50, (2, 9))  # [B, T]
    with torch.no_grad():
        full, none = token_logprobs(logits, targets, 1.0, with_entropy=False)
        chunked, also_none = token_logprobs(logits, targets, 1.0, with_entropy=False, chunk_size=4)
    assert none is None and also_none is None and torch.equal(full, chunked)
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(full, expected)


def test_trainer_with_chunked_logprobs_trains_bit_identically(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    full, chunked = _trainer(toy_model_dir), _trainer(toy_model_dir, logprob_chunk_size=3)
    assert full.train(batch) == chunked.train(batch)
    for (name, a), b in zip(full.model.state_dict().items(), chunked.model.state_dict().values()):
        assert torch.equal(a, b), name
