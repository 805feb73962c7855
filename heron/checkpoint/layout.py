"""Where checkpoints live and how one is committed atomically.

    <checkpoint.dir>/
        rollout-000012/             committed checkpoint (name = rollout id, zero-padded)
            dcp/                    model + optimizer, torch.distributed.checkpoint format
            state.json              run state (rollout id, sampler, RNGs, scheduler, fingerprints)
            in_flight_rollout.json  loop.mode=async: the next rollout, already generated
            hf_meta/                model config, generation config, tokenizer (for HF export)
            hf/                     optional HF folder (checkpoint.hf_export)
            manifest.json           written last: every file with its size and checksum
        latest                      text file naming the newest committed checkpoint
        rollout-000013.tmp-<pid>    a save in progress (never loaded; removed by the next writer)

Commit protocol (``commit``): everything is written into the temporary folder, every file and
folder is fsync'd, the manifest is written and fsync'd last, the folder is renamed to its final
name and the parent fsync'd; only then is ``latest`` replaced by an atomic rename. A crash at
any point leaves either a ``.tmp`` folder (ignored) or a complete checkpoint: a folder named
``rollout-NNNNNN`` is complete by construction, and ``manifest.json`` lets a reader verify it.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from heron.atomic_file import fsync_path, fsync_tree, write_file_durably  # noqa: F401 -- re-exported

CHECKPOINT_NAME = re.compile(r"^rollout-(\d{6,})$")
LATEST = "latest"
STATE_FILE = "state.json"  # the run-level state (RunState), written last before the manifest
IN_FLIGHT_FILE = "in_flight_rollout.json"  # loop.mode=async: the next rollout, generated ahead (RolloutBatch)


def checkpoint_name(rollout_id: int) -> str:
    return f"rollout-{rollout_id:06d}"


def rollout_id_of(path: Path) -> int | None:
    """The rollout id of a committed checkpoint folder name, else None (temp or foreign folder)."""
    match = CHECKPOINT_NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def committed(folder: Path) -> list[Path]:
    """Committed checkpoint folders under ``folder``, newest (highest rollout id) first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and rollout_id_of(p) is not None]
    return sorted(found, key=lambda p: rollout_id_of(p), reverse=True)


def leftovers(folder: Path) -> list[Path]:
    """Temporary folders of saves or deletions that never finished (a crash mid-save)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and (".tmp-" in p.name or p.name.endswith(".deleting")))


def temp_folder(folder: Path, rollout_id: int) -> Path:
    return Path(folder) / f"{checkpoint_name(rollout_id)}.tmp-{os.getpid()}-{time.time_ns()}"


def checkpoint_of(temp: str | Path) -> str:
    """The checkpoint name (``rollout-000012``) a ``temp_folder`` is for."""
    return Path(temp).name.partition(".tmp-")[0]


def commit(temp: Path, final: Path) -> Path:
    """Renames the finished ``temp`` folder to ``final`` and points ``latest`` at it.

    An existing folder at ``final`` (a checkpoint of an abandoned timeline, e.g. after resuming
    from an older checkpoint by path) is moved aside to ``<name>.old-<time>``, never deleted."""
    fsync_tree(temp)
    if final.exists():
        final.rename(final.with_name(f"{final.name}.old-{time.time_ns()}"))
    temp.rename(final)
    fsync_path(final.parent)
    set_latest(final)
    return final


def set_latest(checkpoint: Path) -> None:
    """Atomically replaces ``<dir>/latest`` with the name of ``checkpoint``."""
    pointer = checkpoint.parent / LATEST
    temp = checkpoint.parent / f"{LATEST}.tmp-{os.getpid()}"
    write_file_durably(temp, f"{checkpoint.name}\n".encode())
    os.replace(temp, pointer)
    fsync_path(checkpoint.parent)


def read_latest(folder: Path) -> str | None:
    """The name in ``latest``, or None. A hint for tools only: resume scans the folders."""
    try:
        return (Path(folder) / LATEST).read_text().strip() or None
    except OSError:
        return None


def remove(checkpoint: Path) -> None:
    """Deletes a checkpoint: first an atomic rename (so a crash mid-delete never leaves a
    half-deleted folder under a committed name), then the files."""
    doomed = checkpoint.with_name(f"{checkpoint.name}.deleting")
    checkpoint.rename(doomed)
    fsync_path(checkpoint.parent)
    shutil.rmtree(doomed)


def remove_leftovers(folder: Path) -> list[Path]:
    """Removes temporary folders of saves that never finished; returns them. Call only while
    no save of this run is in flight (the writer does, when it starts)."""
    stale = leftovers(folder)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
