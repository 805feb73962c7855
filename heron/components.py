"""What a run is made of: its components, as built by ``heron.build.build_components``."""

from __future__ import annotations

from dataclasses import dataclass, field

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.cluster.executor import Executor
from heron.config.root import HeronConfig
from heron.evaluator import EvalSuite
from heron.plugins.hooks import DataSource
from heron.plugins.run_hooks import RunHooks
from heron.residency.coordinator import Coordinator
from heron.reward.scorer import RewardScorer
from heron.rollout.batch_filler import BatchFiller
from heron.rollout.engine import RolloutEngine
from heron.rollout.generator import RolloutGenerator
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

    def advantage_estimator(self):
        return self.hooks.advantage or ADVANTAGE_ESTIMATORS[self.cfg.algo.advantage]

    def close(self) -> None:
        """Stops the generator's thread, the engine's servers, then the executor's actors and
        the Ray session it started (no-op locally); idempotent."""
        self.generator.close()  # async generation: stop the background thread first
        self.engine.close()
        self.executor.close()
