"""Writes checkpoints: synchronously, or asynchronously (stage in the caller, write behind).

Async save, step by step (``save``):
1. wait for the previous save (at most one in flight); its error, if any, is raised here;
2. stage: copy model + optimizer tensors to host memory (``dcp_io.stage``) and write the small
   files (``state.json``, ``hf_meta/``) into the temporary folder -- in the caller's thread,
   so when ``save`` returns the live tensors are free to change (and the trainer may sleep);
3. a background thread writes the DCP files (and ``hf/``), the manifest, commits the folder
   (``layout.commit``) and applies ``keep_last``.
Errors of step 3 are kept and raised in the loop by the next ``save``, ``check`` or ``close``
as ``AsyncSaveError`` -- never silently dropped. ``close`` (end of run) waits for the write.

For the residency layer: staging happens inside ``save``; ``wait_until_staged`` lets another
thread wait for it, and ``staging`` says whether it is in progress.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from heron.checkpoint import dcp_io
from heron.checkpoint.errors import AsyncSaveError
from heron.checkpoint.finite import check_finite_state
from heron.checkpoint.fingerprint import model_fingerprint, optimizer_fingerprint
from heron.checkpoint.hf_export import HF_FOLDER, HF_META, write_hf_folder, write_hf_meta
from heron.checkpoint.layout import checkpoint_name, commit, remove_leftovers, temp_folder, write_file_durably
from heron.checkpoint.manifest import total_bytes, write_manifest
from heron.checkpoint.retention import apply_retention

log = logging.getLogger("heron.checkpoint")
STATE_FILE = "state.json"


class CheckpointWriter:
    """Saves checkpoints into ``folder``.

    Example::

        writer = CheckpointWriter("runs/x/checkpoints", async_save=True, keep_last=3)
        writer.save(12, model, optimizer, {"rollout_id": 12, ...})   # returns after staging
        writer.close()                                              # waits for the files
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
        self._process_group = dcp_io.save_process_group()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="heron-ckpt") if async_save else None
        self._pending: tuple[str, Future] | None = None
        self._staged = threading.Event()
        self._staged.set()
        self._host_buffers: dict[str, torch.Tensor] = {}  # reused by every async staging
        self.last_committed: Path | None = None
        self.last_stats: dict[str, float] = {}

    @property
    def staging(self) -> bool:
        return not self._staged.is_set()

    def wait_until_staged(self, timeout: float | None = None) -> bool:
        """Blocks until no save is copying live tensors; True unless ``timeout`` ran out."""
        return self._staged.wait(timeout)

    def save(self, rollout_id: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             run_state: dict) -> None:
        """Saves model, optimizer and ``run_state`` (JSON-able) as ``rollout-<id>``; see module doc."""
        self.wait()
        start = time.perf_counter()
        self._staged.clear()
        try:
            live = dcp_io.live_state(model, optimizer)
            check_finite_state(live, checkpoint_name(rollout_id))  # raises before anything is written
            fingerprint = {
                **run_state.get("fingerprint", {}),
                "model": model_fingerprint(live["model"]),
                "optimizer": optimizer_fingerprint(optimizer, live["optimizer"]),
            }
            tensors = dcp_io.stage(live, self._host_buffers) if self.async_save else live
            temp = temp_folder(self.folder, rollout_id)
            temp.mkdir()
            state = {**run_state, "rollout_id": rollout_id, "fingerprint": fingerprint}
            write_file_durably(temp / STATE_FILE, json.dumps(state, indent=1).encode())
            write_hf_meta(temp / HF_META, model, self.tokenizer)
        finally:
            self._staged.set()
        self.last_stats = {"block_s": time.perf_counter() - start}
        name = checkpoint_name(rollout_id)
        if self._executor is None:
            self._write(temp, rollout_id, tensors, start)
            self.last_stats["block_s"] = time.perf_counter() - start
        else:
            self._pending = (name, self._executor.submit(self._write, temp, rollout_id, tensors, start))

    def save_sharded(self, rollout_id: int, run_state: dict, write_shards) -> None:
        """Saves a trainer whose tensors live in other processes (Ray trainer ranks):
        ``write_shards(temp) -> (fingerprint, checksums)`` writes the DCP files into the
        temporary folder (every rank its shards); state file, manifest, commit and retention
        are as in ``save``. Synchronous: ranks stage nothing in this process. No HF folder."""
        self.wait()
        start = time.perf_counter()
        temp = temp_folder(self.folder, rollout_id)
        temp.mkdir()
        fingerprint, checksums = write_shards(temp)
        state = {**run_state, "rollout_id": rollout_id,
                 "fingerprint": {**run_state.get("fingerprint", {}), **fingerprint}}
        write_file_durably(temp / STATE_FILE, json.dumps(state, indent=1).encode())
        self.last_stats = {}
        self._commit(temp, rollout_id, checksums, start)
        self.last_stats["block_s"] = time.perf_counter() - start

    def _write(self, temp: Path, rollout_id: int, tensors: dict, start: float) -> Path:
        checksums = dcp_io.save(tensors, temp, self._process_group)
        if self.hf_export:
            write_hf_folder(temp / HF_FOLDER, tensors["model"], temp / HF_META)
        return self._commit(temp, rollout_id, checksums, start)

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

    def check(self) -> None:
        """Raises the error of a finished background save, if any (does not wait)."""
        if self._pending is not None and self._pending[1].done():
            self.wait()

    def wait(self) -> Path | None:
        """Waits for the save in flight; raises ``AsyncSaveError`` if it failed."""
        if self._pending is None:
            return self.last_committed
        name, future = self._pending
        self._pending = None
        try:
            future.result()
        except Exception as e:
            raise AsyncSaveError(f"async checkpoint save of {name} failed: {type(e).__name__}: {e}") from e
        return self.last_committed

    def close(self) -> None:
        """Waits for the last save (raising its error) and stops the background thread."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
