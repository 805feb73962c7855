"""The trainer ranks' part of a run checkpoint (``heron.checkpoint``) on the Ray backend.

Saving: the driver's ``CheckpointWriter.save_sharded`` makes the temporary folder (and writes
the tokenizer into ``hf_meta/``) and calls ``shard_writer``'s function, which runs on every
rank inside ``TrainerGroup.save_checkpoint`` (a ``@needs_device`` scope):
- sync (``save_rank_shards``): every rank writes its DCP shards of model + optimizer
  collectively (default group); rank 0 writes ``hf_meta`` (config) and, with
  ``checkpoint.hf_export``, ``hf/`` from the full weights;
- async (``stage_rank_shards``, then ``write_staged_shards``): every rank copies its shards to
  host memory (``dcp_io.stage``; FSDP2 shards stay DTensors) and rank 0 takes the full weights
  for ``hf/`` (the host snapshot all-gathered at the end of ``train``); the call returns, so the
  rank may train or sleep. Each rank then writes what it staged in its actor's ``io`` thread
  (``ComponentHost.apply_io``), through a gloo group of its own (the default group stays free
  for training: DCP on it from another thread deadlocks). The driver's writer commits in its
  background thread once every rank's write returned (``ShardWrite.finish``).
The driver then writes the state file and manifest and commits, as for a local save.

Loading: every rank checks the fit and loads collectively, DCP resharding to this world
size, so a checkpoint saved by N ranks (or one process) resumes with M. The fingerprints use
global shapes (FSDP2 DTensors report them), so they match across world sizes.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.hf_export import HF_FOLDER, HF_META, write_hf_folder, write_hf_meta
from heron.checkpoint.writer import ShardWrite

if TYPE_CHECKING:
    from heron.cluster.trainer_group import TrainerGroup

_STAGED: dict[str, Any] = {}  # this rank's staged save, from stage_rank_shards to write_staged_shards
_IO: dict[str, Any] = {}  # this rank's checkpoint gloo group and reused host buffers


# --- on the driver ------------------------------------------------------------------------
def shard_writer(group: "TrainerGroup", run_state: dict, async_save: bool, hf_export: bool):
    """The ``write_shards`` of ``CheckpointWriter.save_sharded`` for the group's ranks; it
    puts the trainer state (rank 0's) into ``run_state``."""

    def write_shards(temp: Path) -> ShardWrite:
        folder = str(Path(temp).resolve())
        if not async_save:
            results = group.apply_all(save_rank_shards, folder, hf_export)
            run_state["trainer"] = results[0][2]
            checksums = _merged([sums for _, sums, _ in results])
            return ShardWrite(results[0][0], lambda: checksums)
        results = group.apply_all(stage_rank_shards, folder, hf_export, group.collective_timeout_s)
        run_state["trainer"] = results[0][1]
        writes = [(r, r.submit_host("apply_io", write_rank_shards, folder)) for r in group.ranks]
        return ShardWrite(results[0][0], partial(_wait_for_writes, writes, group.timeout_s))

    return write_shards


def _wait_for_writes(writes: list, timeout_s: float) -> dict[str, str]:
    """The ranks' checksums once all wrote; a rank's error is raised as itself (one line)."""
    import ray

    from heron.cluster.remote_call import wait_all

    try:
        return _merged(wait_all(writes, "write checkpoint", timeout_s))
    except ray.exceptions.RayTaskError as error:  # Ray's wrapper repeats the remote traceback
        raise error.cause from None


def _merged(per_rank: list[dict[str, str]]) -> dict[str, str]:
    return {name: checksum for sums in per_rank for name, checksum in sums.items()}


# --- on every rank ------------------------------------------------------------------------
def save_rank_shards(trainer, temp: str, hf_export: bool = False) -> tuple[dict, dict, dict]:
    """Sync: (fingerprint, {file: crc32} of this rank's files, trainer state)."""
    from heron.checkpoint import dcp_io

    live = dcp_io.live_state(trainer.model, trainer.optimizer)
    fingerprint = _fingerprint(trainer, live)
    weights = _hf_weights(trainer, Path(temp), hf_export)
    checksums = dcp_io.save(live, Path(temp), process_group=dist.group.WORLD)
    _write_hf(weights, Path(temp))
    return fingerprint, checksums, _trainer_state(trainer)


def stage_rank_shards(trainer, temp: str, hf_export: bool, timeout_s: float) -> tuple[dict, dict]:
    """Async, step 1 (resident): (fingerprint, trainer state); this rank's shards are now a
    host copy that ``write_staged_shards`` writes (collectives bounded by ``timeout_s``)."""
    from heron.checkpoint import dcp_io

    if "group" not in _IO:  # collective: every rank creates it in the same call
        _IO.update(group=dcp_io.save_process_group(timeout_s), buffers={})
    live = dcp_io.live_state(trainer.model, trainer.optimizer)
    fingerprint = _fingerprint(trainer, live)
    weights = _hf_weights(trainer, Path(temp), hf_export)
    _STAGED.update(temp=temp, tensors=dcp_io.stage(live, _IO["buffers"]), weights=weights)
    return fingerprint, _trainer_state(trainer)


def write_rank_shards(trainer, temp: str) -> dict[str, str]:
    """Async, step 2, as the driver submits it: a failure names this rank, in one line."""
    try:
        return write_staged_shards(trainer, temp)
    except Exception as error:
        raise CheckpointError(f"trainer rank {dist.get_rank()} could not write its shards: {type(error).__name__}: {error}") from None


def write_staged_shards(trainer, temp: str) -> dict[str, str]:
    """Async, step 2 (the actor's io thread): writes what step 1 staged; {file: crc32}."""
    from heron.checkpoint import dcp_io

    staged = dict(_STAGED)
    _STAGED.clear()
    if staged.get("temp") != temp:
        raise RuntimeError(f"no checkpoint staged for {temp} on this rank (staged: {staged.get('temp')})")
    checksums = dcp_io.save(staged["tensors"], Path(temp), process_group=_IO["group"])
    _write_hf(staged["weights"], Path(temp))
    return checksums


def _fingerprint(trainer, live: dict) -> dict:
    from heron.checkpoint.fingerprint import model_fingerprint, optimizer_fingerprint

    return {"model": model_fingerprint(live["model"]), "optimizer": optimizer_fingerprint(trainer.optimizer, live["optimizer"])}


def _trainer_state(trainer) -> dict:
    return {"version": trainer.version, "scheduler": trainer.scheduler.state_dict()}


def _hf_weights(trainer, temp: Path, hf_export: bool) -> dict | None:
    """Rank 0 writes the model's ``hf_meta`` (config) and, with ``hf_export``, returns the full
    weights for ``hf/``: the host snapshot (a fresh copy per publish, never changed after)."""
    if hf_export and trainer._host_weights_version != trainer.version:
        trainer._publish_weights()  # collective; every rank sees the same versions
    if dist.get_rank() != 0:
        return None
    write_hf_meta(temp / HF_META, getattr(trainer.model, "module", trainer.model))  # DDP wraps the model
    return trainer.weights() if hf_export else None


def _write_hf(weights: dict | None, temp: Path) -> None:
    if weights is not None and (temp / HF_META / "config.json").is_file():
        write_hf_folder(temp / HF_FOLDER, weights, temp / HF_META)


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
