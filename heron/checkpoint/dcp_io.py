"""Model and optimizer state through torch.distributed.checkpoint (DCP).

DCP writes a world-size-independent format (``.distcp`` shards + ``.metadata``), so a
checkpoint saved by one process loads into any number of ranks and back (resharding on load).
State dicts come from ``torch.distributed.checkpoint.state_dict`` (keys are parameter names,
also for the optimizer), which works for plain, DDP and FSDP2 modules alike.

Hazards:
- ``get_model_state_dict`` / ``get_optimizer_state_dict`` return tensors that *share memory*
  with the live parameters: an async save must ``stage`` (copy) them before training resumes.
- DCP's ``.metadata`` file and the non-tensor items of its shards are pickles: every load goes
  through ``safe_load``, which unpickles nothing but DCP's metadata classes and plain data.
- Without a process group DCP runs single-process (``no_dist``). With one, saves use a
  dedicated gloo group: async saves on the default group deadlock or abort (notes-cpu.md).
"""

from __future__ import annotations

import copy
import io
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.tensor import DTensor

from heron.checkpoint import safe_load
from heron.checkpoint.manifest import new_digest
from heron.checkpoint.errors import find_cause
from heron.device import HOST, pins_host_memory
from heron.parallel.data_parallel import group_timeout

warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

DCP_FOLDER = "dcp"
UNSET = object()  # a process group not chosen yet (``save_process_group`` is collective: called lazily)
WRITE_THREADS = 2  # measured: 2 threads ~1.6x faster than 1 on this machine; 4 no better


def live_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` keyed by parameter names; tensors share the live storage.
    Frozen parameters are left out: training never changes them (LoRA's base weights are the
    ``model.path`` weights, loaded again by whoever loads the checkpoint, heron.lora)."""
    state: dict[str, Any] = {"model": _without_frozen(model, get_model_state_dict(model))}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    return state


def _without_frozen(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the frozen parameters and their tied names (a head tied to frozen
    input embeddings is an alias of them, not a parameter of its own)."""
    frozen = {_storage(p) for p in model.parameters() if not p.requires_grad} - {None}
    return {k: v for k, v in state.items() if _storage(v) not in frozen} if frozen else state


def _storage(t: torch.Tensor) -> int | None:
    """The address of ``t``'s storage (an FSDP2 shard's local one); None when it holds no bytes
    (an empty shard), which would otherwise compare equal to every other empty one."""
    storage = (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()
    return storage.data_ptr() if storage.nbytes() > 0 else None


def stage(state: Any, buffers: dict | None = None) -> Any:
    """A host copy of ``state`` (tensors copied, pinned when CUDA is present; the rest deep-copied)
    that training can no longer change. Tensors that share storage stay shared in the copy.

    ``buffers`` (kept by the caller across saves) reuses the host tensors of the previous
    staging when shapes match: copying into warm memory is several times faster than into
    fresh pages, at the price of holding one host copy of the state for the whole run."""
    memo: dict[tuple, torch.Tensor] = {}
    buffers = {} if buffers is None else buffers

    def copy_tensor(path: str, t: torch.Tensor) -> torch.Tensor:
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))  # tied tensors: one copy
        if key not in memo:
            host = buffers.get(path)
            if host is None or host.shape != t.shape or host.dtype != t.dtype:
                host = buffers[path] = torch.empty(t.shape, dtype=t.dtype, device=HOST, pin_memory=pins_host_memory(t.device))
            memo[key] = host.copy_(t.detach())
        return memo[key]

    def copy_dtensor(path: str, t: DTensor) -> DTensor:
        """An FSDP2 shard: its local part is copied; the copy keeps the mesh and placements, so
        DCP still writes it as this rank's shard of the global tensor."""
        local = copy_tensor(path, t.to_local())
        return DTensor.from_local(local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride())

    def walk(path: str, node: Any) -> Any:
        if isinstance(node, DTensor):
            return copy_dtensor(path, node)
        if isinstance(node, torch.Tensor):
            return copy_tensor(path, node)
        if isinstance(node, dict):
            return {k: walk(f"{path}/{k}", v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(f"{path}/{i}", v) for i, v in enumerate(node))
        return copy.deepcopy(node)

    return walk("", state)


@contextmanager
def _without_torch_record_crc():
    """torch.save computes a crc32 per zip record (~40% of DCP's save time here); heron's
    manifest already checksums every file, so torch's is skipped while DCP writes.
    The flag is process-global: a torch.save in another thread meanwhile also skips it."""
    previous = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(previous)


class _HashingWriter(io.IOBase):
    """A write-only file wrapper that keeps the checksum (the manifest's) of every byte written
    through it."""

    def __init__(self, raw):
        self._raw = raw
        self.digest = new_digest()

    def write(self, data) -> int:
        self.digest.update(data)  # releases the GIL on large buffers
        return self._raw.write(data)

    def tell(self) -> int:
        return self._raw.tell()

    def flush(self) -> None:
        if not self._raw.closed:
            self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    def writable(self) -> bool:
        return True


class _ChecksummingFileSystem(FileSystem):
    """DCP's local file system, plus the checksum of every file it writes, computed on the way
    out: the manifest needs no second pass over the bytes.

    It also keeps write errors. DCP writes with ``WRITE_THREADS`` threads, and an exception in
    any but the caller's thread escapes DCP (Python prints its traceback to stderr and DCP goes
    on as if that file were written). So a failed write is recorded here and not re-raised, and
    ``save`` raises the first one once DCP returns: one error, with the file it was writing, and
    the checkpoint is never committed."""

    def __init__(self):
        super().__init__()
        self.checksums: dict[str, str] = {}
        self.errors: list[tuple[str, BaseException]] = []

    @contextmanager
    def create_stream(self, path, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        try:
            with Path(path).open(mode) as raw:
                stream = _HashingWriter(raw)
                yield stream
        except Exception as e:  # noqa: BLE001 -- kept and raised by save(), see the class doc
            self.errors.append((str(path), find_cause(e, OSError) or e))
            return
        self.checksums[str(Path(path))] = stream.digest.hexdigest()

    def rename(self, path, new_path) -> None:
        if self.errors:
            return  # the save has failed already; its temporary folder is discarded
        super().rename(path, new_path)
        if str(Path(path)) in self.checksums:
            self.checksums[str(Path(new_path))] = self.checksums.pop(str(Path(path)))

    def raise_first_error(self) -> None:
        if not self.errors:
            return
        path, error = self.errors[0]
        if isinstance(error, OSError) and error.filename is None:
            raise OSError(error.errno, error.strerror, path) from error
        raise error


def save(state: dict[str, Any], folder: Path, process_group: dist.ProcessGroup | None = None) -> dict[str, str]:
    """Writes ``state`` as DCP files into ``folder/dcp`` with every file fsync'd, with
    ``WRITE_THREADS`` files written in parallel (per rank). Returns {path: checksum} of the files.
    A failed write raises its own error (an ``OSError`` naming the file), not DCP's wrapper."""
    writer = dcp.FileSystemWriter(str(Path(folder) / DCP_FOLDER), sync_files=True, thread_count=WRITE_THREADS)
    fs = writer.fs = _ChecksummingFileSystem()
    try:
        with _without_torch_record_crc():
            dcp.save(state, storage_writer=writer, process_group=process_group, no_dist=process_group is None)
    except CheckpointException:
        fs.raise_first_error()
        raise
    fs.raise_first_error()
    return dict(fs.checksums)


def load_into(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, folder: Path,
              process_group: dist.ProcessGroup | None = None) -> None:
    """Loads model (and optimizer) state from the checkpoint ``folder`` into the live objects, in
    place, unpickling nothing but DCP's metadata classes and plain data (``safe_load``)."""
    state = live_state(model, optimizer)
    if process_group is None:
        process_group = world_group()  # data-parallel ranks load collectively (DCP reshards)
    device = next(model.parameters()).device  # where this model's state lives (heron.device resolved it)
    safe_load.load(state, Path(folder) / DCP_FOLDER, process_group, no_dist=process_group is None, device=device)
    # not strict: the frozen parameters are not in the checkpoint; every other key must be
    loaded = set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}
    left = [k for k in loaded.missing_keys if k not in frozen] + list(loaded.unexpected_keys)
    if left:
        raise RuntimeError(f"checkpoint {folder} does not fit the model: {left[0]} missing or unexpected")
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])


def world_group() -> dist.ProcessGroup | None:
    """The trainer's data-parallel group, or None in a single process."""
    return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None


def save_process_group() -> dist.ProcessGroup | None:
    """None in a single process; else a new gloo group used only by checkpoint I/O (collective:
    every rank must call it, in the same order), with the trainer group's collective deadline
    (``cluster.collective_timeout_s``): a rank that dies mid-save fails the others' save then."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo", timeout=group_timeout())
