"""Splitting a rollout's ``TrainBatch`` across data-parallel ranks.

The trainer takes ``steps`` optimizer steps, each on one contiguous mini-batch of
``len(batch) / steps`` rows. Rank r gets the r-th equal share of *every* mini-batch, in step
order, so each rank's step s sees exactly its part of the single-process step s. Rows keep
the whole batch's padding, so a rank computes the same per-row values as one process would.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from heron.trainer.batch import TrainBatch


def shard_for_ranks(batch: TrainBatch, steps: int, world_size: int) -> list[TrainBatch]:
    mini = len(batch) // steps
    if len(batch) % steps or mini % world_size:
        raise ValueError(f"{len(batch)} rows do not split into {steps} mini-batches x {world_size} equal rank shares")
    share = mini // world_size
    return [
        concat([batch.select(slice(s * mini + r * share, s * mini + (r + 1) * share)) for s in range(steps)])
        for r in range(world_size)
    ]


def concat(parts: list[TrainBatch]) -> TrainBatch:
    """Rows of ``parts`` stacked in order (all parts share one padded length)."""
    tensors = {name: None if t is None else torch.cat([getattr(p, name) for p in parts])
               for name, t in parts[0].row_tensors().items()}
    return replace(parts[0], sample_ids=[i for p in parts for i in p.sample_ids], **tensors)
