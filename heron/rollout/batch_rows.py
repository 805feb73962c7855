"""Per-row state of one embedded-engine batch, and the ways its rows are shared, dropped or
grouped for the prefill, none of which changes a row's result beyond summation order (issue 14.4).

Shapes: B = requests in the batch, R = rows still being decoded (R <= B), U = distinct prompts,
P = padded prompt length, T = most new tokens of any row, S = most stop tokens of any row.

- **Shared prompts.** GRPO sends each prompt ``samples_per_prompt`` times. Prefilling a prompt
  gives the same keys and values whichever sampling params follow it, so the engine prefills
  each distinct prompt once (U rows) and copies its cache rows to the B requests.
- **Dropped rows.** A finished row only fed the pad token and was ignored; taking it out of the
  batch saves its share of every later forward.

Both only change how many rows a matmul holds. Each row's result depends on that count only
through the kernel's blocking: measured with torch 2.13's x86 CPU build (MKL sgemm), a row of an
fp32 linear is bit-identical for every row count >= 12 and differs below it. ``MIN_ROWS`` keeps
every matmul at >= 16 rows (or the whole batch when it is smaller), so on this build the engine's
outputs are bit-identical to decoding every row; elsewhere they agree up to summation order
(tests/unit/test_engine_equivalence.py).

- **Prefill groups.** Prompts of very different lengths, padded to the longest, make the prefill
  compute the padding like real tokens; they are prefilled in groups of similar length instead
  (``prefill_groups``) and their caches joined, each row's keys ending at the same slot as with
  left padding (``heron.rollout.kv_cache.join_caches``). Each row's attention then sums over its
  own group's width, not the batch's: the same result up to summation order. Batches whose
  prompts are close in length stay one forward, bit for bit as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from heron.records import GenerationRequest
from heron.rollout.sampling import draw_uniforms

MIN_ROWS = 16  # fewest rows a prefill or decode matmul is shrunk to (see the module docstring)


@dataclass(frozen=True)
class BatchParams:
    """Per-row sampling parameters of the rows being decoded, as tensors on the model's device."""

    temperature: torch.Tensor  # [R]; 1.0 on greedy rows
    top_p: torch.Tensor | None  # [R]; None when no row truncates
    greedy: torch.Tensor | None  # [R] bool; None when no row is greedy
    stop_token_ids: torch.Tensor | None  # [R, S], padded with -1; None when no row has any
    max_new_tokens: torch.Tensor  # [R]
    uniforms: torch.Tensor  # [R, T], row r from its own seeded generator

    @property
    def num_steps(self) -> int:  # T
        return self.uniforms.shape[1]

    def select(self, rows: torch.Tensor) -> BatchParams:
        """The parameters of ``rows`` [R'] (indices into the current R rows)."""
        picked = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: None if v is None else v.index_select(0, rows) for k, v in picked.items()})


def batch_params(requests: Sequence[GenerationRequest], device: torch.device) -> BatchParams:
    params = [r.params for r in requests]
    num_steps = max(p.max_new_tokens for p in params)
    num_stop = max(len(p.stop_token_ids) for p in params)
    generators = [torch.Generator().manual_seed(p.seed) for p in params]
    stop_rows = [list(p.stop_token_ids) + [-1] * (num_stop - len(p.stop_token_ids)) for p in params]
    any_top_p, any_greedy = any(p.top_p < 1 for p in params), any(p.greedy for p in params)
    return BatchParams(
        temperature=torch.tensor([1.0 if p.greedy else p.temperature for p in params], device=device),  # [B]
        top_p=torch.tensor([p.top_p for p in params], device=device) if any_top_p else None,  # [B]
        greedy=torch.tensor([p.greedy for p in params], device=device) if any_greedy else None,  # [B]
        stop_token_ids=torch.tensor(stop_rows, device=device) if num_stop else None,  # [B, S]
        max_new_tokens=torch.tensor([p.max_new_tokens for p in params], device=device),  # [B]
        uniforms=draw_uniforms(generators, num_steps).to(device),  # [B, T]
    )


def distinct_prompts(
    prompts: Sequence[list[int]], *, share: bool, min_rows: int
) -> tuple[list[list[int]], list[int] | None]:
    """(the prompts to prefill, index [B] of each request's prompt among them, or None when every
    request is prefilled on its own). Sharing is skipped when the U distinct prompts would give the
    prefill matmuls fewer than ``min_rows`` rows (U x P tokens) while all B give more."""
    if not share:
        return list(prompts), None
    first: dict[tuple[int, ...], int] = {}
    index = [first.setdefault(tuple(p), len(first)) for p in prompts]
    if len(first) == len(prompts):
        return list(prompts), None
    length = max(len(p) for p in prompts)
    if len(first) * length < min(min_rows, len(prompts) * length):
        return list(prompts), None
    return [list(p) for p in first], index


def prefill_groups(lengths: Sequence[int], forward_tokens: int) -> list[list[int]]:
    """The prompts of lengths ``lengths`` [U] split into groups prefilled by one forward each,
    padded to their group's longest: indices into ``lengths``, longest prompts first, chosen to
    minimise the padded tokens plus ``forward_tokens`` per forward (what one more forward costs,
    in prefill tokens). One group, all of them in order, when splitting saves too little.

    Why: one padded forward over prompts of 60 to 250 tokens runs 2,000 positions for 1,175 real
    ones; the padding is computed like any token. Exact: over the prompts sorted by length, the
    best split into consecutive runs (a run costs its size times its longest length), by dynamic
    programming, O(U^2)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # longest first
    # best[k]: the least cost of prefilling order[k:]; cut[k]: where the group starting at k ends
    best, cut = [0] * (len(order) + 1), [len(order)] * (len(order) + 1)
    for start in range(len(order) - 1, -1, -1):
        longest = lengths[order[start]]
        cost, fewer = min((longest * (end - start) + forward_tokens + best[end], -end)  # ties: longer groups
                          for end in range(start + 1, len(order) + 1))
        best[start], cut[start] = cost, -fewer
    groups, start = [], 0
    while start < len(order):
        groups.append(order[start : cut[start]])
        start = cut[start]
    return [list(range(len(lengths)))] if len(groups) == 1 else groups


def rows_to_keep(active: torch.Tensor, min_rows: int) -> torch.Tensor | None:
    """Indices of the rows to keep decoding, given ``active`` [R] bool; None to keep all R.
    Every active row is kept, and finished ones (the first of them) only while fewer than
    ``min(min_rows, R)`` rows would remain."""
    num_rows, num_active = active.shape[0], int(active.sum())
    target = max(num_active, min(min_rows, num_rows))
    if target == num_rows:
        return None
    order = torch.argsort((~active).to(torch.int8), stable=True)  # active rows first, in order
    return order[:target].sort().values  # [R'], in their batch order
