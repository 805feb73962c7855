"""Writes checkpoints: synchronously, or asynchronously (stage in the caller, write behind).

One save, step by step (``save``), for a trainer in this process and for Ray rank actors alike:
1. wait for the previous save (at most one in flight); its error, if any, is raised here;
2. make the temporary folder, write the tokenizer into ``hf_meta/``;
3. ``source.save_state(request)``: the trainer (every rank) writes its DCP shards into the folder
   (sync), or starts its own background thread that stages them to host memory and writes them
   (async), and returns its fingerprint and ``TrainerState`` (``heron.checkpoint.shards``: until
   the copy is done, the optimizer's step and a sleep of the trainer wait for it);
4. the run state is taken (``state.json``'s bytes: the run's position at this save), beside the
   caller's other small files (an async loop's in-flight rollout);
5. in the caller (sync) or a background thread (async): ``state.json`` and those files are written,
   ``source.wait_saved()`` collects the shards' checksums, then the manifest is written, the
   folder committed (``layout.commit``) and ``keep_last`` applied.
Errors of step 5 are kept and raised in the loop by the next ``save``, ``check`` or ``close``
as ``AsyncSaveError`` -- never silently dropped. ``close`` (end of run) waits for the write.

A failed save (sync or async, any step) removes its temporary folder. A disk failure raises
one line (``CheckpointSaveError``): the OS error (``No space left on device (ENOSPC)``), the
file and checkpoint being written, and the last complete checkpoint. DCP's own
``CheckpointException`` is a ``BaseException`` whose message holds every rank's traceback, so it
is caught by name.

Async: the host copy of the tensors runs in the source's own write thread, after ``save``
returns; the source keeps its live tensors unchanged until then (``heron.checkpoint.shards``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from torch.distributed.checkpoint.api import CheckpointException

from heron.checkpoint.errors import AsyncSaveError, CheckpointSaveError, find_cause
from heron.checkpoint.hf_export import HF_META, write_tokenizer
from heron.checkpoint.save_failure import save_failure_message
from heron.checkpoint.layout import STATE_FILE, checkpoint_name, commit, remove_leftovers, temp_folder, write_file_durably
from heron.checkpoint.manifest import total_bytes, write_manifest
from heron.checkpoint.retention import apply_retention
from heron.checkpoint.shards import SavedShards, ShardRequest

log = logging.getLogger("heron.checkpoint")
RunStateFn = Callable[[SavedShards], dict]


class ShardSource(Protocol):
    """What a checkpoint's tensors come from: a trainer (``heron.trainer.protocol.Trainer``), or
    a bare module + optimizer (``heron.checkpoint.shards.ModuleShards``)."""

    def save_state(self, request: ShardRequest) -> SavedShards: ...

    def wait_saved(self) -> dict[str, str]: ...


class CheckpointWriter:
    """Saves checkpoints into ``folder``.

    Example::

        writer = CheckpointWriter("runs/x/checkpoints", async_save=True, keep_last=3)
        writer.save(12, trainer, {"rollout_id": 12, ...})   # returns after staging
        writer.close()                                     # waits for the files
    """

    def __init__(self, folder: str | Path, *, async_save: bool = True, keep_last: int = 0,
                 hf_export: bool = False, tokenizer: Any = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.async_save = async_save
        self.keep_last = keep_last
        self.hf_export = hf_export
        self.tokenizer = tokenizer
        for path in remove_leftovers(self.folder):
            log.warning("removed %s: the save that wrote it never finished", path)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="heron-ckpt") if async_save else None
        self._pending: tuple[str, Future] | None = None
        self.last_committed: Path | None = None
        self.last_stats: dict[str, float] = {}

    def save(self, rollout_id: int, source: ShardSource, run_state: dict | RunStateFn,
             files: dict[str, bytes] | None = None) -> None:
        """Saves ``source``'s tensors and the run state (JSON-able; or a function of the
        ``SavedShards``, e.g. to include the trainer's state) as ``rollout-<id>``, with ``files``
        (name -> bytes, taken now) beside ``state.json``; see module doc."""
        self.wait()
        start = time.perf_counter()
        temp = temp_folder(self.folder, rollout_id)
        with self._failing_cleanly(temp, rollout_id, CheckpointSaveError):
            temp.mkdir()
            write_tokenizer(temp / HF_META, self.tokenizer)
            shards = source.save_state(ShardRequest(str(temp.resolve()), self.async_save, self.hf_export))
            # the run state now; written with the commit
            files = {**(files or {}), STATE_FILE: _state_file(rollout_id, shards, run_state)}
        self.last_stats = {"block_s": time.perf_counter() - start}
        if self._executor is None:
            self._finish(temp, rollout_id, source, files, start)
            self.last_stats["block_s"] = time.perf_counter() - start
        else:
            job = self._executor.submit(self._finish, temp, rollout_id, source, files, start)
            self._pending = (checkpoint_name(rollout_id), job)

    def _finish(self, temp: Path, rollout_id: int, source: ShardSource, files: dict[str, bytes], start: float) -> Path:
        with self._failing_cleanly(temp, rollout_id, AsyncSaveError if self._executor else CheckpointSaveError):
            for name, data in files.items():
                write_file_durably(temp / name, data)
            return self._commit(temp, rollout_id, source.wait_saved(), start)

    def _commit(self, temp: Path, rollout_id: int, checksums: dict, start: float) -> Path:
        manifest = write_manifest(temp, rollout_id, known=checksums)
        final = commit(temp, self.folder / checkpoint_name(rollout_id))
        self.last_committed = final
        seconds = time.perf_counter() - start
        self.last_stats.update(bytes=total_bytes(manifest), total_s=seconds)
        log.info("committed %s (%.1f MB in %.2f s)", final, total_bytes(manifest) / 1e6, seconds)
        for path in apply_retention(self.folder, self.keep_last, final):
            log.info("deleted %s (checkpoint.keep_last=%d)", path, self.keep_last)
        return final

    @contextmanager
    def _failing_cleanly(self, temp: Path, rollout_id: int, kind: type[CheckpointSaveError]):
        """On any failure the unfinished save is removed (which also gives a full disk its space
        back). A failure of the disk (an OSError anywhere in the chain) or of DCP (its
        ``CheckpointException`` is a BaseException that passes ``except Exception``) becomes one
        line naming it and the last complete checkpoint; anything else, a bug, is re-raised as is."""
        try:
            yield
        except (Exception, CheckpointException) as e:
            shutil.rmtree(temp, ignore_errors=True)
            if find_cause(e, OSError) is None and not isinstance(e, CheckpointException):
                raise
            raise kind(save_failure_message(self.folder, checkpoint_name(rollout_id), temp, e)) from e

    def check(self) -> None:
        """Raises the error of a finished background save, if any (does not wait)."""
        if self._pending is not None and self._pending[1].done():
            self.wait()

    def wait(self) -> Path | None:
        """Waits for the save in flight; raises its error (``AsyncSaveError`` for the disk) if it failed."""
        if self._pending is None:
            return self.last_committed
        _, future = self._pending
        self._pending = None
        future.result()  # raises the save's own error (one line for the disk, see _failing_cleanly)
        return self.last_committed

    def close(self) -> None:
        """Waits for the last save (raising its error) and stops the background thread."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)


def _state_file(rollout_id: int, shards: SavedShards, run_state: dict | RunStateFn) -> bytes:
    """``state.json``: the run state, with the fingerprint and trainer state the source saved."""
    state = run_state(shards) if callable(run_state) else dict(run_state)
    fingerprint = {**state.get("fingerprint", {}), "model": shards.model, "optimizer": shards.optimizer}
    state = {**state, "rollout_id": rollout_id, "fingerprint": fingerprint}
    if shards.trainer is not None:  # what the source restores on load (Trainer.load_state)
        state["trainer"] = asdict(shards.trainer)
    return json.dumps(state, indent=1).encode()
