"""Per-token log-probabilities (and entropies) of a sequence under a causal LM.

logprob[b, t] = log softmax(logits[b, t] / temperature)[input_ids[b, t + 1]]
entropy[b, t] = -sum_v p_v log p_v,   p = softmax(logits[b, t] / temperature)

The same temperature the engine sampled with, so the trainer's recomputed logprobs equal
the engine's (up to float error) when the weights are equal.

Memory: the log-softmax over the vocabulary is [B, T, V] float32, and autograd keeps it (and
its exponential) for the backward -- for a 150 k vocabulary that dwarfs the activations of a
small model. With ``chunk_size > 0`` the positions are split into chunks of that many; each
chunk's log-softmax, gather and entropy run under activation checkpointing, so only the
chunk's [B, c] results stay alive and the backward recomputes one chunk at a time. Every
operation after the model acts on each row (position) alone, so chunking over positions
changes no value: the results are bit-identical to ``chunk_size=0`` (tested). The model's
logits themselves are still materialised once.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

from heron.algo.entropy import entropy_from_logprobs


def forward_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, L]
    attention_mask: torch.Tensor,  # [B, L]
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_size: int = 0,
    forward_context: Callable[[], AbstractContextManager] = nullcontext,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logprobs [B, L-1], entropy [B, L-1] or None), both float32. ``forward_context``
    wraps the model's forward only (mixed precision, heron.trainer.precision): the
    log-softmax and everything after it run in float32 outside it."""
    with forward_context():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # [B, L, V]
    return token_logprobs(logits, input_ids[:, 1:], temperature, with_entropy, chunk_size)


def token_logprobs(
    logits: torch.Tensor,  # [B, T + 1, V]: the last position predicts nothing
    targets: torch.Tensor,  # [B, T] long
    temperature: float,
    with_entropy: bool,
    chunk_size: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logprobs [B, T], entropy [B, T] or None) of ``targets``, ``chunk_size`` positions at a time.

    Chunked, the split runs over all T + 1 positions of the model's logits (no [:, :-1] slice,
    whose backward would allocate another [B, T + 1, V] gradient): the last position is computed
    against a dummy target and dropped, so its gradient is exactly zero, as the slice's is."""
    num_targets = targets.shape[1]
    if chunk_size <= 0 or chunk_size >= num_targets:
        return _chunk(logits[:, :num_targets], targets, temperature, with_entropy)
    padded = torch.cat([targets, targets[:, -1:]], dim=1)  # [B, T + 1]: a dummy target for the last position
    recompute = torch.is_grad_enabled() and logits.requires_grad
    parts = [
        checkpoint(_chunk, z, y, temperature, with_entropy, use_reentrant=False, preserve_rng_state=False)
        if recompute else _chunk(z, y, temperature, with_entropy)
        for z, y in zip(logits.split(chunk_size, dim=1), padded.split(chunk_size, dim=1))  # one SplitBackward
    ]
    logprobs = torch.cat([p[0] for p in parts], dim=1)[:, :num_targets]  # [B, T]
    entropy = torch.cat([p[1] for p in parts], dim=1)[:, :num_targets] if with_entropy else None  # [B, T]
    return logprobs, entropy


def _chunk(logits, targets, temperature: float, with_entropy: bool):
    """logits [B, c, V], targets [B, c] -> (logprobs [B, c], entropy [B, c] or None)."""
    log_softmax = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, c, V]
    logprobs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, c]
    return logprobs, entropy_from_logprobs(log_softmax) if with_entropy else None
