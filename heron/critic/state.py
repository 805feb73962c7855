"""The critic's part of a checkpoint: ``<checkpoint>/critic/``, written by the same save as the
policy (``heron.critic.checkpoint.WithCritic`` is the writer's source), so the manifest covers
it and the commit is atomic for both.

    critic/dcp/            value model + AdamW state (DCP shards, ``heron.checkpoint.shards``)
    critic/state.json      {"fingerprint": {"model": ..., "optimizer": ...}}: checked before loading;
                           "scheduler": the LR scheduler's state (its step), restored with them

Sync or async like the trainer's shards: async stages the live tensors to host and writes behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.layout import write_file_durably
from heron.checkpoint.shards import ModuleShards, SavedShards, ShardRequest

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint

CRITIC_FOLDER = "critic"
CRITIC_STATE = "state.json"


@dataclass
class CriticCheckpoint:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scheduled: bool = False  # a warm-up or decay: the LR depends on the scheduler's step
    _shards: ModuleShards | None = field(default=None, repr=False)

    def save(self, request: ShardRequest, primary: bool = True, on_staged: Callable[[], None] | None = None) -> SavedShards:
        """Writes (or stages) into ``<request.folder>/critic``; returns the fingerprint (global
        shapes). ``primary``: this process writes ``state.json`` (one rank of a data-parallel
        critic); ``on_staged``: see ``ModuleShards.save_state``."""
        folder = Path(request.folder) / CRITIC_FOLDER
        folder.mkdir(exist_ok=True)
        if self._shards is None:
            self._shards = ModuleShards(self.model, self.optimizer)
        saved = self._shards.save_state(replace(request, folder=str(folder), hf_export=False), primary=False, on_staged=on_staged)
        if primary:
            state = {"fingerprint": {"model": saved.model, "optimizer": saved.optimizer},
                     "scheduler": self.scheduler.state_dict()}
            write_file_durably(folder / CRITIC_STATE, json.dumps(state, indent=1).encode())
        return saved

    def wait_saved(self) -> dict[str, str]:
        return {} if self._shards is None else self._shards.wait_saved()

    def load(self, checkpoint: Checkpoint) -> None:
        """Checks that the checkpoint has a critic that fits this one, then loads it (DCP)."""
        from heron.checkpoint import dcp_io
        from heron.checkpoint.fingerprint import check_model, check_optimizer, model_fingerprint, optimizer_fingerprint

        folder = checkpoint.path / CRITIC_FOLDER
        if not (folder / CRITIC_STATE).is_file():
            raise CheckpointError(
                f"checkpoint {checkpoint.path} has no critic state ({CRITIC_FOLDER}/{CRITIC_STATE}): it was saved by a "
                f"run without algo.advantage=gae; resume it with that run's algo.advantage"
            )
        try:
            state = json.loads((folder / CRITIC_STATE).read_text())
            saved = state["fingerprint"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"checkpoint {checkpoint.path} is corrupt: {CRITIC_FOLDER}/{CRITIC_STATE} unreadable ({e})") from None
        live = dcp_io.live_state(self.model, self.optimizer)
        name = f"{checkpoint.name} (critic)"
        check_model(name, saved["model"], model_fingerprint(live["model"]))
        check_optimizer(name, saved["optimizer"], optimizer_fingerprint(self.optimizer, live["optimizer"]))
        if "scheduler" not in state and self.scheduled:
            raise CheckpointError(
                f"checkpoint {checkpoint.path} has no critic LR schedule state (saved by a heron without "
                "critic.lr_schedule): resume it with critic.lr_schedule=constant critic.warmup_steps=0"
            )
        if self._shards is not None:
            self._shards.wait_staged()  # the load writes into the tensors an async save may be copying
        dcp_io.load_into(self.model, self.optimizer, folder, process_group=None)
        if "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
