"""Loading DCP checkpoints without running code from them.

DCP stores two things as pickles, and unpickling runs whatever a pickle names:
- ``.metadata`` (``FileSystemReader.read_metadata``: ``pickle.load``);
- non-tensor items of the shards, e.g. optimizer hyperparameters (``DefaultLoadPlanner.load_bytes``:
  ``torch.load(weights_only=False)``).
A checksum in the manifest does not help: whoever can replace a file can rewrite the manifest.
So heron reads ``.metadata`` with an unpickler that resolves only the classes DCP metadata is
made of (``METADATA_GLOBALS``, found by reading torch's ``metadata.py`` / ``filesystem.py`` and
by unpickling real metadata of plain, DDP and FSDP2 saves), and non-tensor items with
``torch.load(weights_only=True)`` (tensors DCP already loads that way). Anything else is refused
with a one-line ``CheckpointError`` before it is constructed.

Every DCP load in heron goes through ``load`` (``dcp_io.load_into``, the Ray ranks' collective
load, ``parallel.train_state``), and ``read_metadata`` is part of verifying a checkpoint
(``reader.open_checkpoint``: ``heron ckpt list|inspect``, resume, export).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from heron.checkpoint.errors import CheckpointError, find_cause
from heron.device import HOST, map_location

METADATA_FILE = ".metadata"
METADATA_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset({
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    }),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),  # torch.layout pickles as _get_layout("torch.strided")
    "torch": frozenset({"Size"}),  # and every torch.<dtype>, see _allowed
    "pathlib": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),  # storage_meta.checkpoint_id
    "pathlib._local": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),  # Python >= 3.13
    "collections": frozenset({"OrderedDict"}),
}


def _allowed(module: str, name: str) -> bool:
    if name in METADATA_GLOBALS.get(module, ()):
        return True
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file, where: str):
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if not _allowed(module, name):
            raise CheckpointError(
                f"{self.where} refers to {module}.{name}, which DCP metadata never holds (a tampered or foreign "
                f"file); refused to load it (use only checkpoints you wrote)"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise CheckpointError(f"{self.where} holds a persistent reference, which DCP metadata never does; refused to load it")


def _where(dcp_folder: Path) -> str:
    """``checkpoint <ckpt> is unsafe: dcp/.metadata``: names the checkpoint and the file."""
    return f"checkpoint {dcp_folder.parent} is unsafe: {dcp_folder.name}/{METADATA_FILE}"


def read_metadata(dcp_folder: str | Path) -> Metadata:
    """The ``Metadata`` of a DCP folder, unpickled with only DCP's metadata classes allowed."""
    dcp_folder = Path(dcp_folder)
    where = _where(dcp_folder)
    try:
        data = (dcp_folder / METADATA_FILE).read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {dcp_folder.parent} is incomplete: cannot read "
                              f"{dcp_folder.name}/{METADATA_FILE} ({e.strerror or e})") from None
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data), where).load()
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 -- a damaged pickle: any error means "not metadata"
        raise CheckpointError(f"{where} is not readable DCP metadata ({type(e).__name__}: {e})") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{where} holds a {type(metadata).__name__}, not DCP metadata")
    return metadata


class SafeFileSystemReader(dcp.FileSystemReader):
    """DCP's file reader with ``read_metadata`` through the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if kwargs.get("rank") is not None:  # per-rank metadata files are not written by heron
            raise CheckpointError(f"checkpoint {self.path} has per-rank metadata, which heron does not load")
        metadata = read_metadata(self.path)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def load_plain(value: io.BytesIO, device: torch.device, fqn: str) -> Any:
    """A non-tensor item: plain data by ``torch.load(weights_only=True)``, any tensor in it mapped
    to ``device`` (``heron.device.map_location``: a CUDA run's checkpoint resumes on CPU and back;
    DCP itself reads tensor items to the host and copies them into the live tensors)."""
    try:
        return torch.load(value, weights_only=True, map_location=map_location(device))
    except pickle.UnpicklingError as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"checkpoint item {fqn} is not plain data ({reason}); refused to load it (a tampered or foreign "
            f"checkpoint; use only checkpoints you wrote)"
        ) from None


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, with non-tensor items loaded by ``load_plain`` (plain data:
    numbers, strings, tuples, lists, dicts, tensors) instead of a full unpickle."""

    def __init__(self, device: torch.device = HOST):
        super().__init__()
        self.device = device

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        fqn = read_item.dest_index.fqn
        obj = load_plain(value, self.device, fqn)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


def load(state: dict[str, Any], dcp_folder: str | Path, process_group: dist.ProcessGroup | None = None,
         *, no_dist: bool | None = None, device: torch.device = HOST) -> None:
    """``dcp.load`` of ``state`` in place from ``dcp_folder`` with the safe reader and planner.
    A refusal (or another heron error) inside DCP comes out as itself, not wrapped in DCP's
    multi-line ``CheckpointException``."""
    no_dist = (process_group is None and not (dist.is_available() and dist.is_initialized())) if no_dist is None else no_dist
    try:
        dcp.load(state, storage_reader=SafeFileSystemReader(str(dcp_folder)), planner=SafeLoadPlanner(device),
                 process_group=process_group, no_dist=no_dist)
    except CheckpointException as e:
        refusal = find_cause(e, CheckpointError)
        if refusal is not None:
            raise refusal from None
        cause = find_cause(e, OSError) or find_cause(e, Exception) or e
        reason = (str(cause).strip().splitlines() or [""])[-1]
        raise CheckpointError(f"could not load checkpoint {Path(dcp_folder).parent}: {type(cause).__name__}: {reason}") from e
