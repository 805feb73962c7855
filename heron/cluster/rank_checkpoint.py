"""The trainer ranks' part of a run checkpoint (``heron.checkpoint``) on the Ray backend.

Saving: the driver's ``CheckpointWriter.save_sharded`` makes the temporary folder; every rank
writes its DCP shards of model + optimizer into it collectively (``save_rank_shards``); the
driver then writes the state file and manifest and commits. Loading: every rank checks the fit
and loads collectively, DCP resharding to this world size, so a checkpoint saved by N ranks
(or one process) resumes with M. The fingerprints use global shapes (FSDP2 DTensors report
them), so they match across world sizes.
"""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist


def save_rank_shards(trainer, temp: str) -> tuple[dict, dict, dict]:
    """On every rank: (fingerprint, {file: crc32} of this rank's files, trainer state)."""
    from heron.checkpoint import dcp_io
    from heron.checkpoint.finite import check_finite_state
    from heron.checkpoint.fingerprint import model_fingerprint, optimizer_fingerprint

    live = dcp_io.live_state(trainer.model, trainer.optimizer)
    # every rank checks its shards; all raise together, before any rank writes a file
    check_finite_state(live, Path(temp).name.partition(".tmp-")[0], process_group=dist.group.WORLD)
    fingerprint = {
        "model": model_fingerprint(live["model"]),
        "optimizer": optimizer_fingerprint(trainer.optimizer, live["optimizer"]),
    }
    checksums = dcp_io.save(live, Path(temp), process_group=dist.group.WORLD)
    trainer_state = {"version": trainer.version, "scheduler": trainer.scheduler.state_dict()}
    return fingerprint, checksums, trainer_state


def load_rank_checkpoint(trainer, checkpoint, run_config: dict) -> int:
    """On every rank: the fit check (one-line error, nothing loaded), then a collective load."""
    from heron.checkpoint import dcp_io
    from heron.checkpoint.resume import check_fits

    check_fits(checkpoint, trainer.model, trainer.optimizer, run_config)
    dcp_io.load_into(trainer.model, trainer.optimizer, checkpoint.path, process_group=dist.group.WORLD)
    trainer.scheduler.load_state_dict(checkpoint.state["trainer"]["scheduler"])
    trainer.version = checkpoint.state["trainer"]["version"]
    trainer._publish_weights()  # collective: the host snapshot weights() serves follows the load
    return trainer.version
