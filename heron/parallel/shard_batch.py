"""Splitting a rollout's ``TrainBatch`` across data-parallel ranks.

The trainer takes ``steps`` optimizer steps, each on one contiguous mini-batch of
``len(batch) / steps`` rows. Rank r gets its share of *every* mini-batch, in step order, so each
rank's step s sees exactly its part of the single-process step s: the r-th contiguous equal
share, or the rows ``RankBalance`` deals it (heron.parallel.rank_balance: about equal work per
rank, the same number of rows). Rows keep the whole batch's padding, so a rank computes the same
per-row values as one process would.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from heron.parallel.rank_balance import RankBalance, contiguous
from heron.trainer.batch import TrainBatch


def shard_for_ranks(batch: TrainBatch, steps: int, world_size: int, balance: RankBalance | None = None) -> list[TrainBatch]:
    """Each rank's rows of ``batch`` (``rank_rows``), as batches."""
    return shards_of(batch, rank_rows(batch, steps, world_size, balance))


def shards_of(batch: TrainBatch, rows: list[list[int]]) -> list[TrainBatch]:
    """``batch``'s rows ``rows[r]`` for each rank r, at the whole batch's padded length."""
    return [batch.take(share, batch.input_ids.shape[1]) for share in rows]


def rank_rows(batch: TrainBatch, steps: int, world_size: int, balance: RankBalance | None = None) -> list[list[int]]:
    """Row indices of ``batch`` for each rank: its share of every mini-batch, in step order
    (``balance`` None: the contiguous equal shares)."""
    mini = len(batch) // steps
    if len(batch) % steps or mini % world_size:
        raise ValueError(f"{len(batch)} rows do not split into {steps} mini-batches x {world_size} equal rank shares")
    rows: list[list[int]] = [[] for _ in range(world_size)]
    for step in range(steps):
        start = step * mini
        if balance is None:
            shares = contiguous(mini, world_size)
        else:
            shares = balance.shares(batch.select(slice(start, start + mini)), world_size)
        for rank, rank_share in enumerate(shares):
            rows[rank].extend(start + i for i in rank_share)
    return rows


def concat(parts: list[TrainBatch]) -> TrainBatch:
    """Rows of ``parts`` stacked in order (all parts share one padded length)."""
    tensors = {name: None if t is None else torch.cat([getattr(p, name) for p in parts])
               for name, t in parts[0].row_tensors().items()}
    return replace(parts[0], sample_ids=[i for p in parts for i in p.sample_ids], **tensors)
