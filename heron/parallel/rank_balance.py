"""Which rows of a mini-batch each data-parallel rank trains (``train.balance_ranks``).

Why: a data-parallel optimizer step ends in collectives (the gradient reduction; under FSDP2
every forward and backward as well), so it takes as long as its slowest rank. Contiguous equal
shares of a rollout hand one rank the long answers of the hard prompts and another the short
ones, or one rank the groups whose rewards were all equal (advantage 0: skipped,
train.skip_zero_advantage) and another none, which then trains while the first waits. Dealing
the rows so that every rank gets about the same work shortens that wait.

Work of a row: the tokens its forward and backward run, ``len(row)`` (its attention mask's sum);
0 for a row the trainer leaves out for a zero advantage. Attention's share, which grows with
the square of the length, and a prompt shared by its samples (train.share_prompts) are not
counted: the matmuls, linear in the tokens, are most of a step (docs/speed.md).

The deal (Graham's longest-processing-time rule, with equal counts): units, most work first,
each to the rank with the least work so far that still has room; every rank gets
``len(mini) / world_size`` rows. A unit is one prompt's samples, kept on one rank so that its
forward can still share the prompt, where the mini-batch is made of runs of the same prompt, all
of one size, whose number divides by the ranks (a GRPO mini-batch); else a row. Example, work
[9, 8, 2, 1] by row on 2 ranks: contiguous shares [0, 1] and [2, 3] have work 17 and 3; the
deal gives rank 0 rows [0, 3] and rank 1 rows [1, 2], work 10 each. The contiguous shares are
kept where the deal would not lower the largest rank's work (an even batch stays as it was), or
would raise the number of micro-batches every rank runs: a rank runs ``ceil(rows it trains /
micro_batch_size)`` of them and all run the largest count (each forward is a collective under
FSDP2, heron.trainer.packing), and each costs a fixed share (the parameters' all-gathers, the
kernels' start-up) that tokens do not count. A rank's rows keep their mini-batch order.

Why the update is the same: a mini-batch's loss is a sum over its rows divided by one global
normaliser, and the ranks' gradients are averaged (heron.parallel.dp_trainer), so which rank
sums which row changes only the order of float sums (tests/integration/test_rank_balance_ranks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from heron.trainer.batch import TrainBatch
from heron.trainer.shared_prompts import prompt_ids
from heron.trainer.zero_advantage import has_gradient


@dataclass(frozen=True)
class RankBalance:
    """``skips_zero_advantage``: the ranks' trainers leave zero-advantage rows out
    (``PolicyTrainer.skips_zero_advantage_rows``), so those rows weigh nothing. ``deal``: false
    keeps the contiguous shares (``train.balance_ranks=false``); the work is still measured.
    ``micro_batch_size``: ``train.micro_batch_size`` where micro-batches are runs of rows, so a
    deal may not raise their count; 0 where they are packed by tokens (then the work decides)."""

    skips_zero_advantage: bool
    deal: bool = True
    micro_batch_size: int = 0  # rows per micro-batch; 0: not counted (packed by a token budget)

    def work(self, mini: TrainBatch) -> list[int]:
        """Per row of ``mini``: the tokens its forward and backward run (0: skipped)."""
        tokens = mini.attention_mask.sum(dim=-1)  # [B]
        if self.skips_zero_advantage:
            tokens = tokens * has_gradient(mini.advantages, mini.loss_mask)
        return [int(t) for t in tokens.tolist()]

    def shares(self, mini: TrainBatch, world_size: int) -> list[list[int]]:
        """Row indices of ``mini`` for each rank, in order (see the module docstring)."""
        in_order = contiguous(len(mini), world_size)
        if not self.deal:
            return in_order
        work = self.work(mini)
        dealt = deal(work, prompt_runs(mini, world_size), world_size)
        better = _largest(dealt, work) < _largest(in_order, work)
        return dealt if better and self.forwards(dealt, work) <= self.forwards(in_order, work) else in_order

    def forwards(self, shares: list[list[int]], work: list[int]) -> int:
        """The micro-batches every rank runs under ``shares`` (the largest rank's count; 0 when
        ``micro_batch_size`` is 0). A rank trains its rows with work (at least one row)."""
        if self.micro_batch_size <= 0:
            return 0
        trained = [max(1, sum(1 for i in rows if work[i])) for rows in shares]
        return max(-(-n // self.micro_batch_size) for n in trained)


def contiguous(rows: int, world_size: int) -> list[list[int]]:
    """Rows ``0..rows-1`` in ``world_size`` contiguous equal shares: rank r gets the r-th."""
    size = rows // world_size
    return [list(range(r * size, (r + 1) * size)) for r in range(world_size)]


def deal(work: list[int], unit: int, world_size: int) -> list[list[int]]:
    """Rows ``0..len(work)-1`` in units of ``unit`` consecutive rows, dealt to ``world_size``
    ranks by the longest-processing-time rule with equal counts; each rank's rows in order.
    Example: ``deal([9, 8, 2, 1], 1, 2) == [[0, 3], [1, 2]]``."""
    units = [range(start, start + unit) for start in range(0, len(work), unit)]
    unit_work = [sum(work[i] for i in rows) for rows in units]
    room = len(units) // world_size
    load, given = [0] * world_size, [[] for _ in range(world_size)]
    for u in sorted(range(len(units)), key=lambda u: (-unit_work[u], u)):
        rank = min((r for r in range(world_size) if len(given[r]) < room), key=lambda r: (load[r], r))
        given[rank].append(u)
        load[rank] += unit_work[u]
    return [sorted(i for u in units_of_rank for i in units[u]) for units_of_rank in given]


def prompt_runs(mini: TrainBatch, world_size: int) -> int:
    """The unit of the deal: the length of ``mini``'s runs of rows with the same prompt, where
    every run has it and their number divides by ``world_size``; else 1 (rows)."""
    if mini.prompt_lengths is None:
        return 1
    ids = prompt_ids(mini.input_ids, mini.prompt_lengths)
    runs = [1]
    for before, row in zip(ids, ids[1:]):
        if row == before:
            runs[-1] += 1
        else:
            runs.append(1)
    if len(set(runs)) != 1 or len(runs) % world_size or len(set(ids)) != len(runs):
        return 1
    return runs[0]


def rank_work(shares: list[list[int]], work: list[int]) -> list[int]:
    """Each rank's work under ``shares``."""
    return [sum(work[i] for i in rows) for rows in shares]


def imbalance(shares: list[list[int]], work: list[int]) -> float:
    """The largest rank's work over the ranks' mean (1.0: even; the step's time over what even
    shares would take, where time follows the work); 1.0 when there is no work."""
    loads = rank_work(shares, work)
    total = sum(loads)
    return 1.0 if total == 0 else max(loads) * len(loads) / total


def _largest(shares: list[list[int]], work: list[int]) -> int:
    return max(rank_work(shares, work))
