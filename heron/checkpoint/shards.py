"""The trainer's half of a checkpoint: model + optimizer of this process as DCP shards.

One save path for one process and for data-parallel ranks. The driver's ``CheckpointWriter``
makes the temporary folder and hands each trainer process a ``ShardRequest``; every process
(the local trainer, or every rank actor) runs the same ``ModuleShards.save_state`` on its own
model and optimizer, and the driver later collects the files' checksums with ``wait_saved`` and
commits. DCP writes a world-size-independent format, so shards saved by N ranks load into M.

Sync: the finite check (heron.checkpoint.finite) and the files run inside ``save_state``. Async:
``save_state`` copies the live tensors to host buffers (``dcp_io.stage``) and returns; a thread
started for this save (heron.checkpoint.write_thread) checks the copy and writes it (a
non-finite tensor then fails the save from the next wait, before any shard, like a write error).
Either way the trainer may change or sleep as soon as ``save_state`` returns. At most one save
is in flight per process: the next ``save_state`` or ``wait_saved`` waits for it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from heron.checkpoint import dcp_io
from heron.checkpoint.finite import check_finite_state
from heron.checkpoint.fingerprint import model_fingerprint, optimizer_fingerprint
from heron.checkpoint.hf_export import HF_FOLDER, HF_META, write_hf_folder, write_model_meta
from heron.checkpoint.layout import checkpoint_of
from heron.checkpoint.run_state import TrainerState
from heron.checkpoint.write_thread import start_write


@dataclass(frozen=True)
class ShardRequest:
    """Where and how a trainer process writes its part of one checkpoint (sent to rank actors)."""

    folder: str
    """The checkpoint's temporary folder (on a file system every rank sees)."""
    async_save: bool
    """Stage to host memory and write in the background."""
    hf_export: bool = False
    """Also write ``hf/`` (full weights, by the process that holds them) for ``from_pretrained``."""


@dataclass(frozen=True)
class SavedShards:
    """What ``save_state`` returns once the tensors are staged: the fingerprint of what is being
    written (global shapes) and, for a trainer, its ``TrainerState``."""

    model: dict
    optimizer: dict
    trainer: TrainerState | None = None


@dataclass
class ModuleShards:
    """Writes ``model`` + ``optimizer`` of this process into checkpoints (see module doc)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    _buffers: dict = field(default_factory=dict, repr=False)  # host tensors reused by every async staging
    _pending: Future | None = field(default=None, repr=False)
    _group: object = field(default=dcp_io.UNSET, repr=False)

    def save_state(self, request: ShardRequest, hf_weights: dict[str, torch.Tensor] | None = None,
                   primary: bool = True) -> SavedShards:
        """Starts (async) or does (sync) the write; ``hf_weights``: full weights for ``hf/``;
        ``primary``: this process writes the checkpoint-wide files (the model's HF config)."""
        self.wait_saved()
        live = dcp_io.live_state(self.model, self.optimizer)
        saved = SavedShards(model_fingerprint(live["model"]), optimizer_fingerprint(self.optimizer, live["optimizer"]))
        folder = Path(request.folder)
        if primary:
            write_model_meta(folder / HF_META, self.model)
        tensors = dcp_io.stage(live, self._buffers) if request.async_save else live
        job = partial(_write, tensors, folder, self._process_group(), hf_weights if request.hf_export else None)
        if request.async_save:
            self._pending = start_write(job, "heron-ckpt-shards")
        else:  # a failed write raises here and leaves nothing pending
            checksums = job()
            self._pending = Future()
            self._pending.set_result(checksums)
        return saved

    def wait_saved(self) -> dict[str, str]:
        """Waits for the write in flight; returns {path: checksum} of this process's files (or
        raises the write's error). Nothing in flight: {}."""
        pending, self._pending = self._pending, None
        return {} if pending is None else pending.result()

    def _process_group(self):
        if self._group is dcp_io.UNSET:  # collective when distributed: every rank's first save
            self._group = dcp_io.save_process_group()
        return self._group


def _write(tensors: dict, folder: Path, group, hf_weights: dict | None) -> dict[str, str]:
    # before the first shard, every rank agreeing over the save's group; async: on the staged copy,
    # in the background, so its error comes back like a write error (next save, check or close)
    check_finite_state(tensors, checkpoint_of(str(folder)), process_group=group)
    checksums = dcp_io.save(tensors, folder, group)
    if hf_weights:
        write_hf_folder(folder / HF_FOLDER, hf_weights, folder / HF_META)
    return checksums
