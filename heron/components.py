"""What a run is made of: its components, as built by ``heron.build.build_components``."""

from __future__ import annotations

from dataclasses import dataclass, field

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.algo.assign import assign_advantages
from heron.cluster.executor import Executor
from heron.config.root import HeronConfig
from heron.evaluator import EvalSuite
from heron.critic.checkpoint import WithCritic
from heron.critic.critic import Critic
from heron.plugins.hooks import DataSource
from heron.plugins.run_hooks import RunHooks
from heron.residency.coordinator import Coordinator
from heron.reward.scorer import RewardScorer
from heron.rollout.batch_filler import BatchFiller
from heron.rollout.engine import RolloutEngine
from heron.rollout.generator import RolloutGenerator
from heron.records import RolloutBatch
from heron.trainer.batch import TrainBatch
from heron.trainer.protocol import Trainer


@dataclass
class Components:
    cfg: HeronConfig
    tokenizer: object
    sampler: DataSource  # the data source (hooks.data_source or the built-in PromptDataSource)
    generator: RolloutGenerator
    engine: RolloutEngine
    scorer: RewardScorer | BatchFiller  # the reward stage; BatchFiller: DAPO dynamic sampling around the scorer
    trainer: Trainer  # PolicyTrainer in this process, or TrainerGroup over rank actors
    evaluator: EvalSuite | None
    hooks: RunHooks
    residency: Coordinator  # sleep/wake of trainer and engine (in-process or per actor); metrics() per rollout
    executor: Executor  # where engine and trainer run; owns their shutdown
    data_metrics: dict[str, float] = field(default_factory=dict)  # bad rows / long prompts left out (heron.data.metrics)
    critic: Critic | None = None  # the value model of algo.advantage=gae (heron.critic); else None

    def advantage_estimator(self):
        return self.hooks.advantage or ADVANTAGE_ESTIMATORS[self.cfg.algo.advantage]

    def assign_advantages(self, batch: RolloutBatch, penalties=None) -> RolloutBatch:
        """The estimator over the batch's rewards, or with a critic GAE over its values (heron.critic)."""
        if self.critic is None:
            return assign_advantages(batch, self.advantage_estimator(), penalties)
        from heron.critic.advantage_stage import critic_advantages

        return critic_advantages(batch, self.critic, self.tokenizer.pad_token_id, self.cfg.algo, penalties)

    def train(self, batch: TrainBatch) -> dict[str, float]:
        """The policy's steps, then the critic's on the same mini-batches (its metrics as ``critic/*``)."""
        metrics = self.trainer.train(batch)
        if self.critic is not None:
            metrics.update({f"critic/{k}": v for k, v in self.critic.train(batch).items()})
        return metrics

    def checkpoint_source(self) -> Trainer | WithCritic:
        """What a checkpoint saves and restores: the trainer, and the critic when there is one."""
        return self.trainer if self.critic is None else WithCritic(self.trainer, self.critic)

    def close(self) -> None:
        """Stops the generator's thread, the reward's worker processes, the engine's servers, then
        the executor's actors and the Ray session it started (no-op locally); idempotent."""
        self.generator.close()  # async generation: stop the background thread first
        self.scorer.close()
        self.engine.close()
        self.executor.close()
