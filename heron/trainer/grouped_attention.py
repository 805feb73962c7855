"""Attention of a shared-prompt packed row by parts: the prompt once, then each answer against the
prompt and itself (heron.trainer.shared_prompts).

Why: a packed row ``prompt[:-1] | segment_1 | segment_2 | ...`` (a segment: the prompt's last
token and one answer) attended through one dense [S, S] mask computes the scores of every
query against every key of the whole group, S = p + sum_i a_i, although a segment's tokens may
see only the shared part and their own segment. With long answers that is most of the work,
and on GPUs a dense mask also rules out the flash kernels. By parts, with p the shared length
and a the longest segment,

    shared queries:  causal attention over the shared keys                 [G, H, p, p]
    segment queries: attention over (the group's shared keys | its own)    [N, H, a, p + a]
                     masked to the group's real shared length and causal within the segment

so the scores cost G p^2 + N a (p + a) instead of G S^2. Both parts are torch's
``scaled_dot_product_attention`` (the first without a mask, ``is_causal``); the outputs are put
back in packed order by one gather. Each query sees the same keys with the same values as under
the dense mask, so each output is the same sums (masked keys only add exact zeros there):
equal up to summation order (tests/unit/test_grouped_attention.py checks it against the dense
mask; tests/unit/test_shared_prompts.py the whole forward against padded rows).

How it is reached: ``install()`` registers a dispatcher in transformers' attention registry under
``sdpa`` that hands every call to transformers' own SDPA function unless the forward carries a
``heron_groups`` keyword (transformers passes a model's extra forward keywords down to its
attention calls); the trainer passes it with a placeholder mask that no kernel may read, and
``PromptGroups.counting`` fails the forward unless every decoder layer went through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

KEYWORD = "heron_groups"


@dataclass(frozen=True)
class PromptGroups:
    """Where a packed batch's parts sit. Packed rows [G, S]; N segments, each at most ``a``
    positions; ``shared`` (p) the longest shared part of any group."""

    shared: int  # p
    segment_group: torch.Tensor  # [N] long: the packed row of each segment
    segment_index: torch.Tensor  # [N, a] long: flat packed position (g * S + s) of each segment slot
    segment_mask: torch.Tensor  # [N, 1, a, p + a] bool: the keys each segment slot may see
    assemble: torch.Tensor  # [G * S] long: each packed position's row in cat(shared [G * p], segments [N * a])
    calls: list[int] = field(default_factory=lambda: [0])  # attention calls that took this path

    def to(self, device: torch.device) -> PromptGroups:
        return PromptGroups(self.shared, self.segment_group.to(device), self.segment_index.to(device),
                            self.segment_mask.to(device), self.assemble.to(device))

    @contextmanager
    def counting(self, expected: int) -> Iterator[None]:
        """Around one forward: raises unless exactly ``expected`` attention calls (one per decoder
        layer) used the parts, since a model whose attention skipped them read the placeholder.
        (A checkpointed layer's recompute in the backward counts after this check.)"""
        self.calls[0] = 0
        yield
        if self.calls[0] != expected:
            raise RuntimeError(
                f"shared prompts: {self.calls[0]} of {expected} attention layers computed the prompt-grouped attention; "
                "this model does not pass forward keywords to its attention (set train.share_prompts=false)"
            )


def placeholder_mask(rows: int, device: torch.device) -> torch.Tensor:
    """The 4D mask the model gets with ``heron_groups``: transformers passes a 4D mask on
    unchanged (no [S, S] mask is built), and every key masked out means a kernel that read it
    would return no usable attention."""
    return torch.zeros(rows, 1, 1, 1, dtype=torch.bool, device=device)


def _repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[R, KV, T, D] -> [R, KV * groups, T, D], each key/value head repeated for its query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def grouped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, groups: PromptGroups,
                      scaling: float | None, dropout: float) -> torch.Tensor:
    """query [G, H, S, D], key/value [G, KV, S, D] of packed rows -> output [G, S, H, D] (the
    layout transformers' attention functions return)."""
    rows, heads, width, dim = query.shape
    kv_heads, p = key.shape[1], groups.shared
    parts = []
    if p > 0:
        shared = F.scaled_dot_product_attention(
            query[:, :, :p], key[:, :, :p], value[:, :, :p], is_causal=True, dropout_p=dropout, scale=scaling,
            enable_gqa=kv_heads != heads,
        )  # [G, H, p, D]
        parts.append(shared.transpose(1, 2).reshape(rows * p, heads, dim))

    def segments(x: torch.Tensor) -> torch.Tensor:  # [G, h, S, D] -> [N, h, a, D]
        flat = x.transpose(1, 2).reshape(rows * width, x.shape[1], dim)  # [G * S, h, D]
        return flat[groups.segment_index].transpose(1, 2)

    keys, values = segments(key), segments(value)  # [N, KV, a, D]
    if p > 0:
        keys = torch.cat([key[:, :, :p][groups.segment_group], keys], dim=2)  # [N, KV, p + a, D]
        values = torch.cat([value[:, :, :p][groups.segment_group], values], dim=2)
    out = F.scaled_dot_product_attention(
        segments(query), _repeat_heads(keys, heads // kv_heads), _repeat_heads(values, heads // kv_heads),
        attn_mask=groups.segment_mask, dropout_p=dropout, scale=scaling,
    )  # [N, H, a, D]
    parts.append(out.transpose(1, 2).reshape(-1, heads, dim))
    return torch.cat(parts)[groups.assemble].view(rows, width, heads, dim)


def _dispatch(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' ``sdpa`` attention, or the parts when the forward carries ``heron_groups``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = kwargs.pop(KEYWORD, None)
    if groups is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    groups.calls[0] += 1
    return grouped_attention(query, key, value, groups, scaling, dropout), None


def install() -> None:
    """Registers ``_dispatch`` as transformers' ``sdpa`` attention (idempotent). Every forward
    without ``heron_groups`` still runs transformers' own function with the same arguments."""
    from transformers import AttentionInterface

    if AttentionInterface()["sdpa"] is not _dispatch:
        AttentionInterface.register("sdpa", _dispatch)
