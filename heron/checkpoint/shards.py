"""The trainer's half of a checkpoint: model + optimizer of this process as DCP shards.

One save path for one process and for data-parallel ranks. The driver's ``CheckpointWriter``
makes the temporary folder and hands each trainer process a ``ShardRequest``; every process
(the local trainer, or every rank actor) runs the same ``ModuleShards.save_state`` on its own
model and optimizer, and the driver later collects the files' checksums with ``wait_saved`` and
commits. DCP writes a world-size-independent format, so shards saved by N ranks load into M.

Sync: the finite check (heron.checkpoint.finite) and the files run inside ``save_state``, and
the trainer may change or sleep as soon as it returns. Async: ``save_state`` returns at once; a
thread started for this save (heron.checkpoint.write_thread) copies the live tensors to host
buffers (``dcp_io.stage``), then checks the copy and writes it (a non-finite tensor then fails
the save from the next wait, before any shard, like a write error). Until the copy is done the
live tensors must not change, and nothing has to remember that:
- the optimizer's ``step`` waits for it (a step pre-hook, installed once per optimizer), which
  covers every in-place update of weights and optimizer state that training does;
- ``wait_staged`` is what a load into the live tensors calls first (the trainers' ``load_state``);
- ``on_staged`` is called when the copy is done or has failed: the trainers release their
  residency hold with it, so a ``sleep`` waits for the copy (heron.residency.in_flight).
The loop is blocked only for what the caller does (fingerprints, small files): on a GPU the copy
to pinned host memory runs beside the next rollout's generation. At most one save is in flight
per process: the next ``save_state`` or ``wait_saved`` waits for it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
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
    _staged: threading.Event = field(default_factory=threading.Event, repr=False)
    _group: object = field(default=dcp_io.UNSET, repr=False)

    def __post_init__(self) -> None:
        self._staged.set()
        _wait_for_staging_before_step(self.optimizer, self)

    def save_state(self, request: ShardRequest, hf_weights: dict[str, torch.Tensor] | None = None,
                   primary: bool = True, on_staged: Callable[[], None] | None = None) -> SavedShards:
        """Starts (async) or does (sync) the write; ``hf_weights``: full weights for ``hf/``;
        ``primary``: this process writes the checkpoint-wide files (the model's HF config);
        ``on_staged``: called once the live tensors are free again (see module doc)."""
        try:
            self.wait_saved()
            live = dcp_io.live_state(self.model, self.optimizer)
            saved = SavedShards(model_fingerprint(live["model"]), optimizer_fingerprint(self.optimizer, live["optimizer"]))
            folder = Path(request.folder)
            if primary:
                write_model_meta(folder / HF_META, self.model)
            write = partial(_write, folder=folder, group=self._process_group(), hf_weights=hf_weights if request.hf_export else None)
            if request.async_save:
                self._staged.clear()
                self._pending = start_write(partial(self._stage_then_write, live, write, on_staged), "heron-ckpt-shards")
                return saved  # the thread owns the copy and ``on_staged`` from here
        except BaseException:  # also a thread that could not start: nothing is left waiting for it
            self._staged.set()
            if on_staged is not None:
                on_staged()
            raise
        try:  # a failed write raises here and leaves nothing pending
            checksums = write(live)
        finally:
            if on_staged is not None:
                on_staged()
        self._pending = Future()
        self._pending.set_result(checksums)
        return saved

    def _stage_then_write(self, live: dict, write: Callable[[dict], dict[str, str]],
                          on_staged: Callable[[], None] | None) -> dict[str, str]:
        """In the save's thread: the host copy, then the live tensors are released, then the files."""
        try:
            tensors = dcp_io.stage(live, self._buffers)
        finally:
            self._staged.set()
            if on_staged is not None:
                on_staged()
        return write(tensors)

    @property
    def staging(self) -> bool:
        """Whether a save is copying the live tensors now."""
        return not self._staged.is_set()

    def wait_staged(self) -> None:
        """Blocks until no save is copying the live tensors (returns at once when none is)."""
        self._staged.wait()

    def wait_saved(self) -> dict[str, str]:
        """Waits for the write in flight; returns {path: checksum} of this process's files (or
        raises the write's error). Nothing in flight: {}."""
        pending, self._pending = self._pending, None
        return {} if pending is None else pending.result()

    def _process_group(self):
        if self._group is dcp_io.UNSET:  # collective when distributed: every rank's first save
            self._group = dcp_io.save_process_group()
        return self._group


def _wait_for_staging_before_step(optimizer: torch.optim.Optimizer, shards: ModuleShards) -> None:
    """Makes ``optimizer.step`` wait for ``shards``' staging copy. Weak: the hook does not keep
    the shards (and their host buffers) alive, and is removed with them."""
    ref = weakref.ref(shards)

    def wait(*_args) -> None:
        live = ref()
        if live is not None:
            live.wait_staged()

    handle = optimizer.register_step_pre_hook(wait)
    weakref.finalize(shards, handle.remove)


def _write(tensors: dict, folder: Path, group, hf_weights: dict | None) -> dict[str, str]:
    # before the first shard, every rank agreeing over the save's group; async: on the staged copy,
    # in the background, so its error comes back like a write error (next save, check or close)
    check_finite_state(tensors, checkpoint_of(str(folder)), process_group=group)
    checksums = dcp_io.save(tensors, folder, group)
    if hf_weights:
        write_hf_folder(folder / HF_FOLDER, hf_weights, folder / HF_META)
    return checksums
