"""Per-token log-probabilities (and entropies) of a sequence under a causal LM.

logprob[b, t] = log softmax(logits[b, t] / temperature)[input_ids[b, t + 1]]
entropy[b, t] = -sum_v p_v log p_v,   p = softmax(logits[b, t] / temperature)

The same temperature the engine sampled with, so the trainer's recomputed logprobs equal
the engine's (up to float error) when the weights are equal.

Memory: the logits and the log-softmax over the vocabulary are [B, T, V] each, and autograd
keeps them for the backward -- for a 150 k vocabulary that dwarfs the activations of a small
model. With ``chunk_size > 0`` the model's output head itself runs per chunk of that many
positions (heron.trainer.lm_head_chunks): neither tensor is ever held whole, and the backward
recomputes one chunk at a time.

The last position of a row predicts nothing (logprob[b, L-1] would need input_ids[b, L]), so
the padded layout runs the model on input_ids[:, :L-1]: causal attention means no earlier
position sees the last token, so every logprob is the same sum of the same products, and the
layers skip 1/L of their work (TRL's trainer runs all L and drops the last logits). The
shared-prompt layout leaves each answer's last token out of its packed rows in the same way
(heron.trainer.shared_prompts).
"""

from __future__ import annotations

import torch

from heron.trainer.grouped_attention import KEYWORD as GROUPS_KEYWORD
from heron.trainer.grouped_attention import install as install_grouped_attention
from heron.trainer.grouped_attention import placeholder_mask
from heron.trainer.lm_head_chunks import head_in_chunks, position_logprobs
from heron.trainer.precision import ForwardContext, plain_forward
from heron.trainer.shared_prompts import SharedLayout, num_decoder_layers


def forward_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, L]
    attention_mask: torch.Tensor,  # [B, L]
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: int = 0,
    forward_context: ForwardContext = plain_forward,
    layout: SharedLayout | None = None,
    scored: torch.Tensor | None = None,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logprobs [B, L-1], entropy [B, L-1] or None), both float32. ``forward_context``
    wraps the model's forward only (mixed precision and the attention kernel, heron.trainer.precision): the
    log-softmax and everything after it run in float32. ``chunk_size`` > 0: the output head
    runs that many positions at a time (heron.trainer.lm_head_chunks). ``layout``: the batch
    packed so that the samples of a prompt share it (heron.trainer.shared_prompts); positions
    that predict no answer token are then 0. ``scored`` [B, L-1] bool: the positions whose
    values are wanted (the answer positions, ``TrainBatch.answer_positions``); the output head
    runs at those alone and the others are 0 (heron.trainer.lm_head_chunks; None: every
    position). ``entropy_grad=False``: the entropy is a metric, computed outside autograd."""
    head = {"temperature": temperature, "with_entropy": with_entropy, "chunk_size": chunk_size,
            "entropy_grad": entropy_grad}
    if layout is None:
        inputs, mask = predicting_positions(input_ids, attention_mask)
        return _sequence_logprobs(model, inputs, input_ids[:, 1:], {"attention_mask": mask}, forward_context, head,
                                  scored=scored)
    install_grouped_attention()
    inputs = {"attention_mask": placeholder_mask(len(layout.input_ids), input_ids.device),
              "position_ids": layout.position_ids, GROUPS_KEYWORD: layout.groups}
    packed_scored = None if scored is None else layout.packed_positions(scored)
    with layout.groups.counting(num_decoder_layers(model)):
        logprobs, entropy = _sequence_logprobs(model, layout.input_ids, layout.targets, inputs, forward_context,
                                               head, layout.attention_length, packed_scored)
    return layout.gather(logprobs), None if entropy is None else layout.gather(entropy)


def predicting_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) [B, L] without the last position, which predicts nothing and
    so is not run (module docstring); a batch of one position keeps it. Also the critic's rule
    (heron.critic.value_model)."""
    if input_ids.shape[1] < 2:
        return input_ids, attention_mask
    return input_ids[:, :-1], attention_mask[:, :-1]  # [B, L-1] each


def _sequence_logprobs(model, input_ids, targets, inputs, forward_context, head: dict, attention_length=None,
                       scored=None):
    """(logprobs, entropy or None) [R, T] of ``targets`` [R, T] from rows ``input_ids`` [R, S],
    S = T (no position that predicts nothing is run) or T + 1 (a batch of one position, L = 1,
    runs it); ``inputs``: the
    model's other keyword arguments (the mask, position ids); ``head``: what the output head
    computes (``forward_logprobs``' temperature, with_entropy, chunk_size and entropy_grad);
    ``attention_length``: the most keys a query's attention runs over, for the kernel choice
    (default S); ``scored`` [R, T] bool: the positions the head runs at (None: all)."""
    length = attention_length or input_ids.shape[1]
    if scored is not None or 0 < head["chunk_size"] < targets.shape[1]:
        with forward_context(length), head_in_chunks(model, targets, scored=scored, **head) as chunks:
            out = model(input_ids=input_ids, **inputs, use_cache=False).logits  # [R, S, k]
        return chunks.results(out)
    with forward_context(length):
        logits = model(input_ids=input_ids, **inputs, use_cache=False).logits  # [R, S, V]
    return token_logprobs(logits, targets, head["temperature"], head["with_entropy"], head["entropy_grad"])


def token_logprobs(
    logits: torch.Tensor,  # [B, T + 1, V]: the last position predicts nothing
    targets: torch.Tensor,  # [B, T] long
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logprobs [B, T], entropy [B, T] or None) of ``targets`` from whole logits."""
    return position_logprobs(logits[:, : targets.shape[1]], targets, temperature, with_entropy, entropy_grad)
