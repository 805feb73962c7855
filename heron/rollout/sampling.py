"""Token selection for one decode step, as pure tensor functions.

Shapes: B = rows in the batch, V = vocabulary size, T = decode steps.

Order of operations for a sampled row:
    scaled   = logits / temperature
    logprob  = log_softmax(scaled)[token]          (reported; BEFORE top-p truncation)
    token    ~ softmax(top_p_filter(scaled, top_p))
A greedy row takes argmax(logits) and reports log_softmax(logits)[token] (temperature 1).

Why the reported logprob ignores top-p: the trainer recomputes log p(token) from the same
weights at the same temperature over the full vocabulary; reporting the truncated
distribution would make the engine and trainer disagree on every nucleus-sampled token.

Per-row randomness: each row draws its uniforms from its own ``torch.Generator`` (seeded by
its request), and a token is picked by inverse-CDF with that row's uniform. So a request's
sample depends on its seed and decode step only, never on the other rows in its batch, while
the selection itself is one batched op (no per-row ``multinomial`` in the decode loop).
"""

from __future__ import annotations

import torch


def scale_by_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """logits [B, V] / temperature [B] (per row; each > 0) -> [B, V]."""
    return logits / temperature.unsqueeze(-1)  # [B, V]


def top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keeps each row's nucleus, the smallest set of most likely tokens whose probability mass
    reaches ``top_p``; every other logit becomes -inf. The top token is always kept.

    A token is kept when the mass of the tokens ranked above it is below ``top_p``.
    logits [B, V], top_p [B] in (0, 1] -> [B, V].
    """
    sorted_logits, sorted_index = logits.sort(dim=-1, descending=True)  # [B, V]
    sorted_probs = sorted_logits.softmax(dim=-1)  # [B, V]
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V]
    drop_sorted = mass_before >= top_p.unsqueeze(-1)  # [B, V]
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_index, drop_sorted)  # [B, V]
    return logits.masked_fill(drop, float("-inf"))  # [B, V]


def draw_uniforms(generators: list[torch.Generator], num_steps: int) -> torch.Tensor:
    """Row b gets the first ``num_steps`` uniforms of ``generators[b]``'s stream -> [B, T]."""
    return torch.stack([torch.rand(num_steps, generator=g, dtype=torch.float64) for g in generators])


def sample_with_uniforms(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: row b takes the first token whose cumulative probability exceeds
    ``uniforms[b]``. logits [B, V] (may hold -inf), uniforms [B] in [0, 1) -> tokens [B].

    The CDF is accumulated in float64 so that u * total < total always holds and a token with
    zero probability can never be chosen.
    """
    probs = logits.softmax(dim=-1).to(torch.float64)  # [B, V]
    cdf = probs.cumsum(dim=-1)  # [B, V]
    threshold = uniforms.to(cdf.device, torch.float64) * cdf[:, -1]  # [B]
    tokens = torch.searchsorted(cdf, threshold.unsqueeze(-1), right=True)  # [B, 1]
    return tokens.squeeze(-1).clamp_(max=logits.shape[-1] - 1)  # [B]


def sample_tokens(logits: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """Samples one token per row of logits [B, V] with row b's own generator -> [B]."""
    uniforms = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])  # [B]
    return sample_with_uniforms(logits, uniforms)


def select_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    uniforms: torch.Tensor,
    top_p: torch.Tensor | None = None,
    greedy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step: picks a token per row and returns (tokens [B], logprobs [B]).

    logits [B, V]; temperature [B] (greedy rows must carry 1.0); uniforms [B];
    top_p [B] or None when no row truncates; greedy [B] bool or None when no row is greedy.
    """
    scaled = scale_by_temperature(logits, temperature)  # [B, V]
    logprobs_all = scaled.log_softmax(dim=-1)  # [B, V]
    candidates = scaled if top_p is None else top_p_filter(scaled, top_p)  # [B, V]
    tokens = sample_with_uniforms(candidates, uniforms)  # [B]
    if greedy is not None:
        tokens = torch.where(greedy, logits.argmax(dim=-1), tokens)  # [B]
    logprobs = logprobs_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [B]
    return tokens, logprobs
