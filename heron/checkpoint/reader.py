"""Finding and opening checkpoints. A checkpoint is used only after it verified: every file of
its manifest present with its size and checksum, and its DCP metadata readable with the restricted
unpickler (``safe_load``). The newest one that verifies wins, and every newer one that does not
is named in a warning with the reason."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.layout import STATE_FILE, committed, leftovers, rollout_id_of
from heron.checkpoint import safe_load
from heron.checkpoint.dcp_io import DCP_FOLDER
from heron.checkpoint.manifest import MANIFEST, total_bytes, verify
from heron.checkpoint.run_state import RunState, TrainerState

log = logging.getLogger("heron.checkpoint")


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint folder and its run state (``state.json``)."""

    path: Path
    rollout_id: int
    state: dict
    num_bytes: int

    @property
    def name(self) -> str:
        return self.path.name

    def run_state(self) -> RunState:
        """``state.json`` as a typed ``RunState`` (one-line error if it is not one)."""
        return RunState.from_json(self.state, str(self.path))

    def trainer_state(self) -> TrainerState:
        """The ``TrainerState`` the trainer saved (one-line error if there is none)."""
        try:
            return TrainerState(**self.state["trainer"])
        except (KeyError, TypeError) as e:
            raise CheckpointError(f"checkpoint {self.path} is corrupt: state.json has no trainer state ({e})") from None


def open_checkpoint(path: str | Path, *, quick: bool = False) -> Checkpoint:
    """Verifies ``path`` (sizes, and checksums unless ``quick``) and reads its state file;
    raises a one-line ``CheckpointError`` if it is missing, incomplete or corrupt."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist (expected a folder like rollout-000012)")
    _refuse_a_folder_of_checkpoints(path)
    manifest = verify(path, quick=quick)
    if (path / DCP_FOLDER).is_dir():
        safe_load.read_metadata(path / DCP_FOLDER)
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except ValueError as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: {STATE_FILE} is not JSON ({e})") from None
    rollout_id = state.get("rollout_id")
    if not isinstance(rollout_id, int) or rollout_id != manifest.get("rollout_id"):
        raise CheckpointError(f"checkpoint {path} is corrupt: rollout_id of {STATE_FILE} and manifest differ")
    return Checkpoint(path=path, rollout_id=rollout_id, state=state, num_bytes=total_bytes(manifest))


def _refuse_a_folder_of_checkpoints(path: Path) -> None:
    """A run folder or a checkpoint folder given where one checkpoint is expected: name one."""
    if (path / MANIFEST).exists():
        return
    for kind, folder in (("a checkpoint folder", path), ("a run folder", path / "checkpoints")):
        found = committed(folder)
        if found:
            raise CheckpointError(f"{path} is {kind}, not one checkpoint; pass one of its checkpoints, "
                                  f"e.g. {found[0]} (the newest)")


def find_latest(folder: str | Path) -> Checkpoint | None:
    """The newest checkpoint in ``folder`` that verifies, or None. Warns about (and skips)
    every newer folder that does not, and about unfinished temporary folders."""
    for path in leftovers(Path(folder)):
        log.warning("ignoring %s: a save or deletion that never finished", path)
    for path in committed(Path(folder)):
        try:
            checkpoint = open_checkpoint(path)
        except CheckpointError as e:
            log.warning("skipping checkpoint %s: %s", path.name, e)
            continue
        if checkpoint.rollout_id != rollout_id_of(path):
            log.warning("skipping checkpoint %s: it holds rollout %d", path.name, checkpoint.rollout_id)
            continue
        return checkpoint
    return None


def load_into(checkpoint: Checkpoint, model, optimizer) -> None:
    """Loads the checkpoint's model (and optimizer) tensors into the live objects via DCP."""
    from heron.checkpoint import dcp_io

    dcp_io.load_into(model, optimizer, checkpoint.path)
