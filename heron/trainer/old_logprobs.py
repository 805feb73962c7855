"""Where a rollout's old logprobs (pi_old of the policy loss's ratio pi / pi_old) come from.

With ``train.recompute_old_logprobs=true`` pi_old is the trainer's policy at the weights before
the rollout's first optimizer step. A separate no-grad forward over the whole batch computes it.
When the rollout is trained in one optimizer step, the first (and only) training forward runs
at exactly those weights, so its logprobs, detached, *are* pi_old: the ratio is 1 in value and
its gradient is grad log pi, as with the recomputed values, and one forward per rollout is saved
(TRL's GRPOTrainer does the same). The decision depends on the config and the objective only, so
it is made once per trainer and is the same on every data-parallel rank (the forward is a
collective under FSDP2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from heron.config.train import TrainConfig

if TYPE_CHECKING:
    from heron.trainer.objectives import Objective

OldLogprobSource = Literal["engine", "forward", "training_forward"]


@dataclass(frozen=True)
class OldLogprobPlan:
    """Example: ``OldLogprobPlan("training_forward", "one optimizer step per rollout ...")``.

    source: ``engine`` -- the engine's sampling logprobs (``recompute_old_logprobs=false``);
    ``forward`` -- a separate no-grad forward before the first step; ``training_forward`` --
    each micro-batch's training forward, detached."""

    source: OldLogprobSource
    reason: str

    @property
    def runs_forward(self) -> bool:
        return self.source == "forward"


def plan_old_logprobs(cfg: TrainConfig, objective: Objective) -> OldLogprobPlan:
    """The separate forward is needed when

    - ``train.steps_per_rollout > 1``: step s > 0 trains on weights that step 0 already changed,
      so its training forward is no longer pi_old;
    - the objective compares pi_old with the engine's logprobs (``algo.off_policy``: TIS/MIS
      weights and the mismatch metrics are computed over the whole batch before the first loss);
    - ``train.old_logprobs_forward=always`` asks for it.

    Stale samples (async rollouts, ``policy_version`` below the trainer's) do *not* need it: the
    recompute evaluates the trainer's current weights, as the first training forward does; the
    behaviour policy that sampled them is seen only through the engine's logprobs
    (``algo.off_policy``). Every built-in policy loss (PPO clip, dual clip, GSPO, CISPO), the
    KL and entropy terms read pi_old only inside the loss, token by token or per sequence; a
    sequence never spans micro-batches."""
    if not cfg.recompute_old_logprobs:
        return OldLogprobPlan("engine", "train.recompute_old_logprobs=false: the engine's logprobs are pi_old")
    if cfg.old_logprobs_forward == "always":
        return OldLogprobPlan("forward", "train.old_logprobs_forward=always")
    if cfg.steps_per_rollout > 1:
        return OldLogprobPlan("forward", f"train.steps_per_rollout={cfg.steps_per_rollout}: later steps see changed weights")
    if objective.compares_with_engine:
        return OldLogprobPlan("forward", "algo.off_policy compares pi_old with the engine's logprobs before the first step")
    return OldLogprobPlan("training_forward", "one optimizer step per rollout: the training forward's logprobs are pi_old")
