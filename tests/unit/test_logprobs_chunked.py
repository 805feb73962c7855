"""Logprobs with the output head run per chunk of positions (train.logprob_chunk_size,
heron.trainer.lm_head_chunks): the [B, L, V] logits and log-softmax never exist whole, and the
values and gradients equal the whole head's within the round-off of another summation order
(tests/tolerance.py, rule 2: a chunk's matmul may take another kernel, and the head weight's
gradient is summed chunk by chunk) -- with a large vocabulary, under grad and without, in the
trainer, and refused for a model that changes its head's output."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Gemma2Config, Gemma2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from heron.errors import UserError
from heron.trainer.lm_head_chunks import head_in_chunks, output_head
from heron.trainer.logprobs import forward_logprobs, token_logprobs
from tests.tolerance import assert_logprobs_close, gamma, reduction_length
from tests.unit.test_packing import _trainer, assert_same_update
from tests.unit.test_trainer import _rollout


def _wide_vocab_model(vocab_size: int = 32_000) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    model = Qwen3ForCausalLM(config).float()
    torch.nn.init.normal_(model.lm_head.weight, std=0.5)  # logits of a few units: peaked, not near-uniform, distributions
    return model


def _inputs(model, rows: int = 3, length: int = 21):
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, model.config.vocab_size, (rows, length), generator=g)  # [B, L]
    mask = torch.ones_like(input_ids)
    mask[1, length - 6:] = 0  # a padded row
    return input_ids, mask


def _loss_and_grads(model, input_ids, mask, chunk_size, temperature):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = forward_logprobs(model, input_ids, mask, temperature, with_entropy=True, chunk_size=chunk_size)
    (logprobs.sum() + 0.1 * entropy.sum()).backward()
    return logprobs.detach(), entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.portability
@pytest.mark.parametrize("chunk_size", [1, 5, 16])
def test_chunked_head_logprobs_entropy_and_gradients_equal_the_whole_head(chunk_size):
    model = _wide_vocab_model()
    input_ids, mask = _inputs(model)
    n = reduction_length(model.config, tokens=input_ids.numel())
    log_vocab = math.log(model.config.vocab_size)
    for temperature in (1.0, 0.7):
        full = _loss_and_grads(model, input_ids, mask, 0, temperature)
        chunked = _loss_and_grads(model, input_ids, mask, chunk_size, temperature)
        assert_logprobs_close(chunked[0], full[0], n=n, log_vocab=log_vocab)
        assert_logprobs_close(chunked[1], full[1], n=n, log_vocab=log_vocab)  # entropies, on the same scale
        for name, grad in full[2].items():
            # norm-wise, two evaluations of the same chain of sums (rule 2)
            bound = 2 * gamma(n) * grad.norm()
            assert (chunked[2][name] - grad).norm() <= bound, (name, float((chunked[2][name] - grad).norm()), float(bound))
        assert full[2]["lm_head.weight"].norm() > 0


class _LargestTensor(TorchDispatchMode):
    """Records the most elements any op's output had (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


@pytest.mark.parametrize("chunk_size", [0, 4])
def test_no_tensor_of_the_whole_logits_exists_with_chunks(chunk_size):
    """The largest tensor of a forward + backward: [B, L-1, V] whole (the last position is not
    run), [B, c, V] in chunks (this is what the memory saving rests on; the embedding and its
    gradient are V x H, smaller here)."""
    model = _wide_vocab_model()
    input_ids, mask = _inputs(model, rows=3, length=41)
    whole = input_ids.shape[0] * (input_ids.shape[1] - 1) * model.config.vocab_size
    with _LargestTensor() as largest:
        _loss_and_grads(model, input_ids, mask, chunk_size, 1.0)
    if chunk_size == 0:
        assert largest.numel >= whole
    else:
        weights = model.config.vocab_size * model.config.hidden_size  # the embedding, the head, their gradients
        assert largest.numel <= max(input_ids.shape[0] * chunk_size * model.config.vocab_size, weights) < whole / 3


def test_chunked_logprobs_without_grad_and_without_entropy():
    model = _wide_vocab_model(vocab_size=500)
    input_ids, mask = _inputs(model)
    with torch.no_grad():
        full, none = forward_logprobs(model, input_ids, mask, 1.0, with_entropy=False)
        chunked, also_none = forward_logprobs(model, input_ids, mask, 1.0, with_entropy=False, chunk_size=4)
    assert none is None and also_none is None and not chunked.requires_grad
    assert_logprobs_close(chunked, full, n=reduction_length(model.config, input_ids.numel()), log_vocab=math.log(500))
    logits = torch.randn(2, 10, 50, generator=torch.Generator().manual_seed(0))  # [B, T + 1, V]
    targets = torch.randint(0, 50, (2, 9))  # [B, T]
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(token_logprobs(logits, targets, 1.0, with_entropy=False)[0], expected)


def test_the_head_forward_is_restored_on_every_exit():
    model = _wide_vocab_model(vocab_size=100)
    head = output_head(model)
    assert head is model.lm_head and "forward" not in head.__dict__
    targets = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(RuntimeError, match="inside"):
        with head_in_chunks(model, targets, 1.0, False, 2):
            assert "forward" in head.__dict__
            raise RuntimeError("inside")
    assert "forward" not in head.__dict__
    own = lambda x: x  # noqa: E731  an instance-level forward (as accelerate's hooks set) comes back
    head.forward = own
    with head_in_chunks(model, targets, 1.0, False, 2):
        assert head.forward is not own
    assert head.forward is own


def test_a_model_that_changes_its_head_output_is_refused():
    """Gemma 2 soft-caps its logits after the head: chunked logprobs would be of the uncapped
    logits, so the first forward says so in one line instead."""
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=8, max_position_embeddings=32, final_logit_softcapping=30.0)
    model = Gemma2ForCausalLM(config).float()
    input_ids = torch.randint(0, 64, (2, 9))
    with pytest.raises(UserError, match=r"does not return its lm_head's output .* set train.logprob_chunk_size=0"):
        forward_logprobs(model, input_ids, torch.ones_like(input_ids), chunk_size=3)
    assert "forward" not in model.lm_head.__dict__
    forward_logprobs(model, input_ids, torch.ones_like(input_ids))  # whole logits: the model is unchanged


@pytest.mark.portability
def test_trainer_with_chunked_logprobs_gives_the_whole_head_update(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    assert_same_update(_trainer(toy_model_dir, logprob_chunk_size=3), _trainer(toy_model_dir), batch)
