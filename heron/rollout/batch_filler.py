"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, section 3.2): only groups whose
rewards differ reach the trainer.

Under a group baseline, a group whose rewards are all equal (all right or all wrong) has
advantage 0 for every sample: it costs a forward and backward pass and gives no gradient,
and as accuracy rises more groups go that way, so the effective batch shrinks. DAPO
over-samples and filters: keep generating until the batch holds ``rollout.batch_size``
groups whose rewards are not all equal.

``BatchFiller`` does this as the run's reward stage (``score(batch)``, in place of the
plain ``RewardScorer``), so the loop does not change: it scores the generated batch, drops
the uninformative groups, and while groups are missing -- at most
``rollout.dynamic_sampling.max_rounds`` extra rounds -- draws as many new prompts from the
data source as groups are missing, generates and scores them, and keeps the informative
ones. If the cap is reached, the batch is topped up with the first dropped groups (zero
advantage; the batch keeps its size, which the trainer's mini-batches rely on) and the
shortfall is reported. Filtering sees the training reward (with overlong shaping, if on),
i.e. exactly what the advantage estimator sees.

Determinism and resume: extra round k = 1, 2, ... generates with
``derive_seed(run.seed, "dynamic_sampling", k)`` in place of run.seed, so every sample's
seed is a pure function of (run seed, round, rollout_id, prompt_id, sample_index) and a
prompt drawn again in a later round gets new samples. Extra prompts come from the run's
data source, whose cursor is saved in the checkpoint after the rollout: a resumed run
continues after the last prompt drawn, exactly like the uninterrupted one.

Metrics: ``dynamic_sampling/rounds`` (extra rounds), ``groups_drawn``, ``informative_fraction``
(of the drawn groups), ``groups_topped_up``, and ``reward_mean_drawn``, the mean reward
of every drawn sample -- the policy's accuracy (``reward/mean`` covers the kept groups
only, which are mixed by construction).
"""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.dynamic_sampling import DynamicSamplingConfig
from heron.plugins.hooks import DataSource
from heron.plugins.postprocess import checked_prompts
from heron.records import Group, RolloutBatch
from heron.reward.scorer import RewardScorer
from heron.rollout.generator import RolloutGenerator
from heron.seeding import derive_seed


def is_informative(group: Group) -> bool:
    """True when the group's rewards are not all equal (a group baseline gives it a gradient)."""
    rewards = group.rewards
    return any(r != rewards[0] for r in rewards)


@dataclass
class _Tally:
    rounds: int = 0
    groups_drawn: int = 0
    informative: int = 0
    topped_up: int = 0
    reward_sum: float = 0.0
    num_samples: int = 0
    num_errors: int = 0
    overlong_sum: float = 0.0


class BatchFiller:
    def __init__(
        self, scorer: RewardScorer, generator: RolloutGenerator, data_source: DataSource,
        settings: DynamicSamplingConfig, seed: int, source_name: str = "",
    ):
        """``seed``: run.seed (extra rounds derive theirs from it); ``source_name``:
        hooks.data_source, named in the error if the data source answers wrongly."""
        self.scorer = scorer
        self.generator = generator
        self.data_source = data_source
        self.max_rounds = settings.max_rounds
        self.seed = seed
        self.source_name = source_name
        self.tally = _Tally()

    def close(self) -> None:
        """Stops the scorer's reward worker processes, if any."""
        self.scorer.close()

    def score(self, batch: RolloutBatch) -> RolloutBatch:
        """Scores ``batch`` and refills it to ``rollout.batch_size`` informative groups."""
        self.tally = _Tally()
        num_groups = len(batch.groups)
        kept, dropped = self._score_and_split(batch)
        while len(kept) < num_groups and self.tally.rounds < self.max_rounds:
            self.tally.rounds += 1
            missing = num_groups - len(kept)
            prompts = checked_prompts(self.data_source.get_samples(missing), missing, self.source_name)
            seed = derive_seed(self.seed, "dynamic_sampling", self.tally.rounds)
            more_kept, more_dropped = self._score_and_split(self.generator.generate(batch.rollout_id, prompts, seed=seed))
            kept += more_kept
            dropped += more_dropped
        top_up = dropped[: num_groups - len(kept)]
        self.tally.topped_up = len(top_up)
        return RolloutBatch(batch.rollout_id, batch.policy_version, kept + top_up)

    def _score_and_split(self, batch: RolloutBatch) -> tuple[list[Group], list[Group]]:
        self.scorer.score(batch)
        t = self.tally
        t.groups_drawn += len(batch.groups)
        t.num_samples += batch.num_samples
        t.reward_sum += sum(s.reward for s in batch.samples)
        t.num_errors += self.scorer.num_errors
        t.overlong_sum += self.scorer.overlong_mean * batch.num_samples
        kept = [g for g in batch.groups if is_informative(g)]
        t.informative += len(kept)
        return kept, [g for g in batch.groups if not is_informative(g)]

    def metrics(self) -> dict[str, float]:
        """The scorer's metrics over every round, and the dynamic-sampling counts of the latest rollout."""
        t = self.tally
        drawn = max(t.num_samples, 1)
        metrics = {**self.scorer.metrics(), "reward/num_errors": float(t.num_errors)}
        if "reward/overlong_penalty_mean" in metrics:
            metrics["reward/overlong_penalty_mean"] = t.overlong_sum / drawn
        return {
            **metrics,
            "dynamic_sampling/rounds": float(t.rounds),
            "dynamic_sampling/groups_drawn": float(t.groups_drawn),
            "dynamic_sampling/informative_fraction": t.informative / max(t.groups_drawn, 1),
            "dynamic_sampling/groups_topped_up": float(t.topped_up),
            "dynamic_sampling/reward_mean_drawn": t.reward_sum / drawn,
        }
