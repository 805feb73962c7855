"""The embedded engine's decode loop as it was before issue 14 (every row prefilled on its own,
finished rows kept in the batch feeding the pad token), kept verbatim as the oracle the faster
engine is compared against (tests/unit/test_engine_equivalence.py).

Shapes: B rows, P padded prompt length, T most new tokens of any row, V vocabulary, S stop tokens.
"""

from __future__ import annotations

import inspect

import torch

from heron.records import Generation, GenerationRequest
from heron.rollout.sampling import draw_uniforms, select_tokens


def _forward(model, cache_kwarg, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
    output = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        use_cache=True, logits_to_keep=1, **{cache_kwarg: cache},
    )
    return output.logits[:, -1, :].float()  # [B, V]


@torch.inference_mode()
def reference_generate(model, pad_token_id: int, requests: list[GenerationRequest]) -> list[Generation]:
    """One batch of ``requests`` decoded the pre-issue-14 way -> one Generation per request."""
    from transformers import DynamicCache

    cache_kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    params = [r.params for r in requests]
    num_steps = max(p.max_new_tokens for p in params)
    num_stop = max(len(p.stop_token_ids) for p in params)
    temperature = torch.tensor([1.0 if p.greedy else p.temperature for p in params])  # [B]
    top_p = torch.tensor([p.top_p for p in params]) if any(p.top_p < 1 for p in params) else None  # [B]
    greedy = torch.tensor([p.greedy for p in params]) if any(p.greedy for p in params) else None  # [B]
    stop_ids = (
        torch.tensor([list(p.stop_token_ids) + [-1] * (num_stop - len(p.stop_token_ids)) for p in params])
        if num_stop else None
    )  # [B, S]
    max_new = torch.tensor([p.max_new_tokens for p in params])  # [B]
    uniforms = draw_uniforms([torch.Generator().manual_seed(p.seed) for p in params], num_steps)  # [B, T]
    prompts = [r.prompt_tokens for r in requests]
    length = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_token_id] * (length - len(p)) + p for p in prompts])  # [B, P]
    prompt_mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts])  # [B, P]
    num_rows, prompt_len = input_ids.shape
    full_mask = torch.cat([prompt_mask, prompt_mask.new_ones(num_rows, num_steps)], dim=1)  # [B, P + T]
    positions = (prompt_mask.cumsum(dim=-1) - 1).clamp(min=0)  # [B, P]
    cache = DynamicCache(config=model.config)
    logits = _forward(model, cache_kwarg, input_ids, prompt_mask, positions, cache)  # [B, V]
    next_position = positions[:, -1:] + 1  # [B, 1]
    tokens_out = torch.full((num_rows, num_steps), pad_token_id)  # [B, T]
    logprobs_out = torch.zeros(num_rows, num_steps)  # [B, T]
    num_tokens = max_new.clone()  # [B]
    stopped = torch.zeros(num_rows, dtype=torch.bool)  # [B]
    active = torch.ones(num_rows, dtype=torch.bool)  # [B]
    for step in range(num_steps):
        tokens, logprobs = select_tokens(logits, temperature, uniforms[:, step], top_p, greedy)  # [B], [B]
        tokens_out[:, step] = tokens
        logprobs_out[:, step] = logprobs
        if stop_ids is not None:
            hit_stop = active & (tokens.unsqueeze(-1) == stop_ids).any(dim=-1)  # [B]
            num_tokens = torch.where(hit_stop, step + 1, num_tokens)
            stopped |= hit_stop
            active &= ~hit_stop
        active &= max_new > step + 1
        if not bool(active.any()):
            break
        feed = tokens.masked_fill(~active, pad_token_id).unsqueeze(-1)  # [B, 1]
        logits = _forward(model, cache_kwarg, feed, full_mask[:, : prompt_len + step + 1], next_position, cache)
        next_position = next_position + 1
    rows = zip(tokens_out.tolist(), logprobs_out.tolist(), num_tokens.tolist(), stopped.tolist())
    return [
        Generation(tokens=t[:n], logprobs=lp[:n], finish_reason="stop" if s else "length", policy_version=0)
        for t, lp, n, s in rows
    ]
