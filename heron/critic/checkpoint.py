"""``WithCritic``: the policy trainer and the critic as one checkpoint source, so a run with a
critic keeps the one save path (``CheckpointWriter.save``) and the one load path
(``heron.checkpoint.resume.restore``): the trainer writes its shards and ``state.json`` parts,
the critic its ``critic/`` folder (``heron.critic.state``) into the same temporary folder, and
the writer's manifest and commit cover both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint
    from heron.checkpoint.run_state import TrainerState
    from heron.checkpoint.shards import SavedShards, ShardRequest
    from heron.critic.critic import Critic
    from heron.trainer.protocol import Trainer


@dataclass(frozen=True)
class WithCritic:
    trainer: Trainer
    critic: Critic

    def save_state(self, request: ShardRequest) -> SavedShards:
        """The trainer's shards (its fingerprint and ``TrainerState`` go into state.json), then the critic's."""
        saved = self.trainer.save_state(request)
        self.critic.save_state(request)
        return saved

    def wait_saved(self) -> dict[str, str]:
        return {**self.trainer.wait_saved(), **self.critic.wait_saved()}

    def load_state(self, checkpoint: Checkpoint, run_config: dict) -> TrainerState:
        """The trainer first (it checks the config fits), then the critic (it checks its own shapes)."""
        state = self.trainer.load_state(checkpoint, run_config)
        self.critic.load_state(checkpoint)
        return state
