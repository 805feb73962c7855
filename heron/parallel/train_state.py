"""Trainer state through torch.distributed.checkpoint (DCP), on any world size.

``save_train_state`` writes model + optimizer as DCP shards (one process, or every rank of a
data-parallel group collectively) plus ``trainer_state.json`` (policy version, LR
scheduler). ``load_train_state`` reads it into a trainer of *any* world size: DCP reshards
on load, so a run saved with N ranks resumes with M. This is the trainer's part of a
checkpoint; the run-level checkpoint (layout, manifest, RNGs, data cursor) is
``heron.checkpoint``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from heron.checkpoint import safe_load

STATE_FILE = "trainer_state.json"


def _is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def save_train_state(trainer, folder: str | Path) -> None:
    """Every rank calls this with the same ``folder``."""
    folder = Path(folder)
    model_state, optim_state = get_state_dict(trainer.model, trainer.optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))
    if _is_rank0():
        meta = {"version": trainer.version, "scheduler": trainer.scheduler.state_dict()}
        (folder / STATE_FILE).write_text(json.dumps(meta))


def load_train_state(trainer, folder: str | Path) -> int:
    """Loads model + optimizer (resharded to this world size) and the scheduler; returns the
    policy version the state was saved at."""
    folder = Path(folder)
    model_state, optim_state = get_state_dict(trainer.model, trainer.optimizer)
    state = {"model": model_state, "optim": optim_state}
    safe_load.load(state, folder)  # unpickles nothing but DCP metadata and plain data
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    meta = json.loads((folder / STATE_FILE).read_text())
    trainer.scheduler.load_state_dict(meta["scheduler"])
    trainer.version = int(meta["version"])
    trainer._publish_weights()  # the host snapshot weights() serves follows the load
    return trainer.version
