"""The last position of a padded row predicts nothing, so heron.trainer.logprobs does not run it
(nor does the critic's value model, heron.critic.value_model): the model sees input_ids[:, :L-1]. Causal attention keeps every earlier position's output the
same sum of the same products, so logprobs, entropies and gradients equal those of the whole
row's forward (the reference here: the model's own logits over all L positions, the last
dropped, as TRL computes them) within the round-off of another summation order
(tests/tolerance.py, rule 2: the matmuls hold one row of positions fewer)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from heron.critic.value_model import ValueModel
from heron.trainer.lm_head_chunks import position_logprobs
from heron.trainer.logprobs import forward_logprobs
from tests.tolerance import assert_logprobs_close, gamma, reduction_length


def _model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    model = Qwen3ForCausalLM(config).float()
    torch.nn.init.normal_(model.lm_head.weight, std=0.5)  # peaked distributions, not near-uniform ones
    return model


def _inputs(model, rows: int = 4, length: int = 19):
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, model.config.vocab_size, (rows, length), generator=g)  # [B, L]
    mask = torch.ones_like(input_ids)
    mask[1, length - 5:] = 0  # a right-padded row
    return input_ids, mask


def _whole_row(model, input_ids, mask, temperature):
    """(logprobs, entropy, grads) from all L positions' logits, the last one dropped."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits  # [B, L, V]
    logprobs, entropy = position_logprobs(logits[:, :-1], input_ids[:, 1:], temperature, True)
    (logprobs.sum() + 0.1 * entropy.sum()).backward()
    return logprobs.detach(), entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def _heron(model, input_ids, mask, temperature, **kw):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = forward_logprobs(model, input_ids, mask, temperature, with_entropy=True, **kw)
    (logprobs.sum() + 0.1 * entropy.sum()).backward()
    return logprobs.detach(), entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


class _Positions:
    """Records the sequence length of every forward of ``decoder`` (an HF base model)."""

    def __init__(self, decoder):
        self.lengths: list[int] = []
        self._handle = decoder.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module, args, kwargs):
        self.lengths.append(kwargs["input_ids"].shape[1])

    def remove(self):
        self._handle.remove()


# the ways the padded layout runs its output head: whole, per chunk, at the answer positions only
HEADS = {"whole": {}, "chunks": {"chunk_size": 5}, "scored": "scored"}


def _head_kwargs(name, input_ids):
    if HEADS[name] != "scored":
        return HEADS[name]
    scored = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, dtype=torch.bool)  # [B, L-1]
    scored[:, 6:] = True  # the answer positions of a 7-token prompt
    return {"scored": scored}


@pytest.mark.portability
@pytest.mark.parametrize("head", list(HEADS))
def test_the_last_position_is_not_run_and_nothing_changes(head):
    model = _model()
    input_ids, mask = _inputs(model)
    n = reduction_length(model.config, tokens=input_ids.numel())
    log_vocab = math.log(model.config.vocab_size)
    kw = _head_kwargs(head, input_ids)
    positions = _Positions(model.model)
    for temperature in (1.0, 0.7):
        positions.lengths.clear()
        ours = _heron(model, input_ids, mask, temperature, **kw)
        assert positions.lengths == [input_ids.shape[1] - 1]
        positions.remove()
        reference = _whole_row(model, input_ids, mask, temperature)
        positions = _Positions(model.model)
        keep = kw.get("scored", torch.ones_like(ours[0], dtype=torch.bool))
        assert_logprobs_close(ours[0][keep], reference[0][keep], n=n, log_vocab=log_vocab)
        assert_logprobs_close(ours[1][keep], reference[1][keep], n=n, log_vocab=log_vocab)  # entropies
        if head == "scored":
            continue  # the reference's gradients include the unscored positions
        for name, grad in reference[2].items():
            bound = 2 * gamma(n) * grad.norm()  # norm-wise, the same chain of sums (rule 2)
            assert (ours[2][name] - grad).norm() <= bound, (name, float((ours[2][name] - grad).norm()), float(bound))
        assert reference[2]["model.embed_tokens.weight"].norm() > 0


def test_a_one_position_batch_still_runs():
    """L = 1 (no position predicts a token): nothing to drop, logprobs [B, 0]."""
    model = _model()
    input_ids = torch.tensor([[5], [7]])
    logprobs, entropy = forward_logprobs(model, input_ids, torch.ones_like(input_ids), with_entropy=True)
    assert logprobs.shape == entropy.shape == (2, 0)


def _value_model() -> ValueModel:
    model = _model()
    critic = ValueModel(model.model, model.config.hidden_size)
    torch.nn.init.normal_(critic.value_head.weight, std=0.5)  # the head starts at zero: give it values
    return critic


@pytest.mark.portability
def test_the_critic_does_not_run_the_last_position_and_its_values_and_gradients_do_not_change():
    critic = _value_model()
    input_ids, mask = _inputs(critic.backbone)
    positions = _Positions(critic.backbone)
    values = critic(input_ids, mask)  # [B, L-1]
    positions.remove()
    assert positions.lengths == [input_ids.shape[1] - 1]
    values.sum().backward()
    ours = {k: p.grad.clone() for k, p in critic.named_parameters()}
    critic.zero_grad(set_to_none=True)
    hidden = critic.backbone(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state  # [B, L, H]
    reference = critic.value_head(hidden[:, :-1]).squeeze(-1)  # every position run, the last one dropped
    reference.sum().backward()
    n = reduction_length(critic.backbone.config, tokens=input_ids.numel())
    bound = 2 * gamma(n) * reference.detach().abs().sum()  # norm-wise (rule 2)
    assert (values - reference).detach().abs().sum() <= bound
    for name, param in critic.named_parameters():
        grad_bound = 2 * gamma(n) * param.grad.norm()
        assert (ours[name] - param.grad).norm() <= grad_bound, (name, float((ours[name] - param.grad).norm()))
    assert critic.value_head.weight.grad.norm() > 0


def test_a_one_position_batch_gets_no_values():
    critic = _value_model()
    input_ids = torch.tensor([[5], [7]])
    assert critic(input_ids, torch.ones_like(input_ids)).shape == (2, 0)
