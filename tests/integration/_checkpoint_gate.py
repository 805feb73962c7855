"""Test instrumentation run *inside* a trainer-rank actor (through ``ComponentHost.apply``):
holds that rank's background checkpoint write (``write_staged_shards``) until a file exists,
or makes it fail. The real write runs once the gate opens."""

from __future__ import annotations

import time
from pathlib import Path


def hold_writes_until(trainer, gate: str, fail: bool = False) -> None:
    import heron.cluster.rank_checkpoint as rank_checkpoint

    original = getattr(rank_checkpoint, "_ungated_write", rank_checkpoint.write_staged_shards)

    def gated(trainer, temp: str):
        Path(gate).with_suffix(".entered").touch()  # the write started in the io thread
        while not Path(gate).exists():
            time.sleep(0.02)
        if fail:
            raise OSError(28, "No space left on device (injected by the test)")
        return original(trainer, temp)

    rank_checkpoint._ungated_write = original
    rank_checkpoint.write_staged_shards = gated


def shift_weights(trainer, delta: float) -> None:
    """Adds ``delta`` to every parameter (each rank its shard), then republishes the host
    snapshot (collective: run on every rank): live weights that surely differ from a save's."""
    import torch

    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.add_(delta)
    trainer._publish_weights()
