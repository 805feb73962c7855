"""Per-token log-probabilities of a sequence under a causal LM.

logprob[b, t] = log softmax(logits[b, t] / temperature)[input_ids[b, t + 1]]

The same temperature the engine sampled with, so the trainer's recomputed logprobs equal
the engine's (up to float error) when the weights are equal.
"""

from __future__ import annotations

import torch

from heron.algo.entropy import entropy_from_logits


def forward_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, L]
    attention_mask: torch.Tensor,  # [B, L]
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Returns (logprobs [B, L-1], entropy [B, L-1] or None)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    logits = logits[:, :-1].float() / temperature  # [B, L-1, V]
    targets = input_ids[:, 1:].unsqueeze(-1)  # [B, L-1, 1]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1)  # [B, L-1]
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logprobs, entropy
