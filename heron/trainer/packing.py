"""Micro-batches of an optimizer mini-batch: by row count, or packed under a token budget.

``train.max_tokens_per_micro_batch = 0``: consecutive runs of ``micro_batch_size`` rows, each cut
to its own longest row (trailing padding past every row of the run is never computed; until
2026-12-07 they were padded to the batch's length, as collated). ``> 0``: rows are sorted by
length (longest first) and packed greedily while ``rows x longest row <= budget``; each
micro-batch is cut to its own longest row, so short rows no longer pay for the padding of the
longest one, and a forward costs about the same everywhere. Inside a micro-batch the rows keep
their batch order.

With shared prompts (``train.share_prompts``, heron.trainer.shared_prompts) the rows of a prompt
are taken one after the other, and the budget counts what the forward holds: the packed rows x
their length where ``shared_shape`` says the layout applies (the same decision ``plan`` makes),
else the padded rows. A micro-batch of four 128-token samples sharing a 96-token prompt holds
227 tokens, not 512, so a budget takes ~2.3x as many of them (bench/shared_prompts.py).

Why the gradient is unchanged: every loss term is ``sum_it w_it l_it / Z`` with per-row weights
and one normaliser Z of the whole mini-batch (heron.algo.loss_agg), so the mini-batch loss is
the sum of the micro-batch losses however the rows are grouped; trailing padding is masked out
of attention (causal, right-padded) and of the loss. Grouping changes only the order of float
sums; with the same grouping and length it is the same computation (bit-identical, tested).

Data-parallel ranks must run the same number of forwards (each is a collective under FSDP2):
``count(n)`` returns the number every rank uses (the largest), and a rank with fewer micro-batches
splits its largest ones in two (one row at least each, cut where both parts still fit the
budget), which changes no value either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from heron.trainer.batch import TrainBatch
from heron.trainer.model_flops import ForwardCost
from heron.trainer.shared_prompts import prompt_ids, shared_shape


@dataclass(frozen=True)
class MicroBatch:
    """``batch``: rows ``rows`` of the mini-batch (a slice, or indices in batch order), cut to
    ``length`` positions."""

    rows: slice | torch.Tensor
    length: int
    batch: TrainBatch

    def take(self, per_position: torch.Tensor) -> torch.Tensor:
        """This micro-batch's part of a mini-batch tensor [B, L-1] -> [b, length-1]."""
        return per_position[self.rows, : self.length - 1]


def trained_rows(parts: list[MicroBatch]) -> list[int]:
    """The mini-batch rows the micro-batches hold, in order."""
    rows: list[int] = []
    for part in parts:
        if isinstance(part.rows, slice):
            start = part.rows.start or 0
            rows.extend(range(start, start + len(part.batch)))
        else:
            rows.extend(part.rows.tolist())
    return sorted(rows)


def stitch(parts: list[MicroBatch], like: torch.Tensor, fn: Callable[[TrainBatch], torch.Tensor]) -> torch.Tensor:
    """The mini-batch tensor [B, L-1] (zeros like ``like``) with ``fn(part.batch)`` [b, length-1]
    of every micro-batch in its rows: the inverse of ``MicroBatch.take``."""
    out = torch.zeros_like(like)  # [B, L-1]
    for part in parts:
        out[part.rows, : part.length - 1] = fn(part.batch)
    return out


def micro_batches(
    mini: TrainBatch, micro_batch_size: int, max_tokens: int, count: Callable[[int], int] = lambda n: n,
    rows: list[int] | None = None, share_cost: ForwardCost | None = None,
) -> list[MicroBatch]:
    """The micro-batches of ``mini`` (see the module docstring); ``count(n)``: how many every
    data-parallel rank runs, given this rank's ``n`` (asked when packing or when ``rows`` is
    given). ``rows``: only these rows of ``mini`` (in order; None: all of them), e.g. those with
    a gradient (heron.trainer.zero_advantage); when every rank must run more micro-batches than
    this rank has rows, left-out rows are added back. ``share_cost``: the forward shares prompts
    (heron.trainer.shared_prompts) with this cost model; packing then keeps the rows of one
    prompt next to each other and counts the tokens of the shared layout (``pack_rows``)."""
    full = mini.input_ids.shape[1]
    lengths = mini.attention_mask.sum(dim=-1).tolist()  # [B] tokens per row (right-padded)
    if max_tokens <= 0 and rows is None:
        return [_in_order(mini, lengths, slice(s, s + micro_batch_size)) for s in range(0, len(mini), micro_batch_size)]
    budget = _Budget.of(mini, lengths, max_tokens, share_cost)
    chosen = list(range(len(mini))) if rows is None else list(rows)
    groups = _groups(chosen, lengths, micro_batch_size, budget)
    target = count(len(groups))
    if len(chosen) < target:  # a rank with fewer rows than forwards: rows without gradient fill in
        taken = set(chosen)
        left_out = [i for i in range(len(mini)) if i not in taken]
        chosen = sorted(chosen + left_out[: target - len(chosen)])
        groups = _groups(chosen, lengths, micro_batch_size, budget)
    groups = split_to_count(groups, target, budget.fits)
    if max_tokens <= 0 and len(chosen) == len(mini) and len(groups) == -(-len(mini) // micro_batch_size):
        return micro_batches(mini, micro_batch_size, 0)  # every row, as without ``rows``: the same slices
    out = []
    for group in groups:
        group_rows = sorted(group)
        length = cut_length([lengths[i] for i in group_rows], full)
        out.append(MicroBatch(torch.tensor(group_rows), length, mini.take(group_rows, length)))
    return out


def _in_order(mini: TrainBatch, lengths: list[int], rows: slice) -> MicroBatch:
    """Rows ``rows`` of ``mini`` as they are, cut to their longest row."""
    length = cut_length(lengths[rows], mini.input_ids.shape[1])
    return MicroBatch(rows, length, mini.select(rows).cut(length))


def cut_length(lengths: list[int], full: int) -> int:
    """The positions a micro-batch of rows with ``lengths`` tokens is cut to (at least 2: one target)."""
    return min(full, max(2, max(lengths)))


@dataclass(frozen=True)
class _Budget:
    """``max_tokens`` (<= 0: none) and what a micro-batch of some of ``lengths``' rows holds:
    rows x their cut length, or, where the forward shares prompts (``prompts``, ``prompt_lengths``
    and ``cost`` set) and heron.trainer.shared_prompts.plan takes them, its packed rows x their length."""

    max_tokens: int
    lengths: list[int]
    full: int
    prompts: list[int] | None = None
    prompt_lengths: list[int] | None = None
    cost: ForwardCost | None = None

    @classmethod
    def of(cls, mini: TrainBatch, lengths: list[int], max_tokens: int, cost: ForwardCost | None) -> "_Budget":
        full = mini.input_ids.shape[1]
        if cost is None or max_tokens <= 0 or mini.prompt_lengths is None:
            return cls(max_tokens, lengths, full)
        return cls(max_tokens, lengths, full, prompt_ids(mini.input_ids, mini.prompt_lengths),
                   mini.prompt_lengths.tolist(), cost)

    def fits(self, rows: list[int]) -> bool:
        """Whether a micro-batch of ``rows`` is within the budget (a single row always is: it
        cannot be split)."""
        return self.max_tokens <= 0 or len(rows) == 1 or self.tokens(rows) <= self.max_tokens

    def tokens(self, rows: list[int]) -> int:
        """The tokens the forward of a micro-batch of ``rows`` holds."""
        length = cut_length([self.lengths[i] for i in rows], self.full)
        if self.cost is not None:
            shape = shared_shape([self.lengths[i] for i in rows], [self.prompt_lengths[i] for i in rows],
                                 [self.prompts[i] for i in rows], length, self.cost)
            if shape is not None:
                return shape[0] * shape[1]
        return len(rows) * length


def _groups(rows: list[int], lengths: list[int], micro_batch_size: int, budget: _Budget) -> list[list[int]]:
    """``rows`` in runs of ``micro_batch_size`` (no token budget), or packed under the budget."""
    if budget.max_tokens <= 0:
        return [rows[s : s + micro_batch_size] for s in range(0, len(rows), micro_batch_size)]
    chosen_prompts = None if budget.prompts is None else [budget.prompts[i] for i in rows]
    tokens = None if budget.cost is None else (lambda group: budget.tokens([rows[k] for k in group]))
    packed = pack_rows([lengths[i] for i in rows], budget.max_tokens, chosen_prompts, tokens)
    return [[rows[k] for k in group] for group in packed]


def pack_rows(lengths: list[int], max_tokens: int, prompts: list[int] | None = None,
              tokens: Callable[[list[int]], int] | None = None) -> list[list[int]]:
    """Row indices grouped longest first, each group's ``len(group) * its longest <= max_tokens``
    (a row longer than the budget alone). Example: lengths [3, 9, 4, 8], budget 16 ->
    [[1], [3, 2], [0]]. ``prompts``: each row's prompt id; the rows of a prompt are then taken
    one after the other (prompts by their longest row, longest first), so that they land in one
    micro-batch unless the budget ends inside them. Example: lengths [9, 3, 8, 4], prompts
    [0, 0, 1, 1], budget 18 -> [[0, 1], [2, 3]] (without prompts: [[0, 2], [3, 1]]).
    ``tokens(group)``: what a group holds, instead of ``len(group) * its longest`` (with shared
    prompts: the packed layout's tokens); asked for every candidate group, where the default is
    kept up as rows join."""
    if prompts is None:
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    else:
        longest: dict[int, int] = {}
        for i, prompt in enumerate(prompts):
            longest[prompt] = max(longest.get(prompt, 0), lengths[i])
        order = sorted(range(len(lengths)), key=lambda i: (-longest[prompts[i]], prompts[i], -lengths[i], i))
    groups: list[list[int]] = []
    longest_of_last = 0  # the longest row of groups[-1] (with prompts, not always its first)

    def joins_last(i: int) -> bool:
        if not groups:
            return False
        if tokens is None:
            return (len(groups[-1]) + 1) * max(longest_of_last, lengths[i]) <= max_tokens
        return tokens(groups[-1] + [i]) <= max_tokens

    for i in order:
        if joins_last(i):
            groups[-1].append(i)
            longest_of_last = max(longest_of_last, lengths[i])
        else:
            groups.append([i])
            longest_of_last = lengths[i]
    return groups


def split_to_count(groups: list[list[int]], target: int,
                   fits: Callable[[list[int]], bool] = lambda group: True) -> list[list[int]]:
    """``groups`` with its largest groups cut in two until there are ``target`` of them: in the
    middle, or at the cut nearest the middle where both parts ``fits`` the budget (with shared
    prompts a part that no longer shares one holds padded rows, which can be more tokens than the
    whole held; a cut between two prompts' rows keeps both sharing)."""
    groups = [list(g) for g in groups]
    while len(groups) < target:
        largest = max(range(len(groups)), key=lambda k: len(groups[k]))
        group = groups[largest]
        if len(group) < 2:
            raise ValueError(f"cannot split {sum(map(len, groups))} rows into {target} micro-batches")
        cuts = sorted(range(1, len(group)), key=lambda k: (abs(2 * k - len(group)), -k))  # the middle first
        cut = next((k for k in cuts if fits(group[:k]) and fits(group[k:])), cuts[0])
        groups[largest : largest + 1] = [group[:cut], group[cut:]]
    return groups
