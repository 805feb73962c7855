"""The executor decides where the engine and the trainer (and a critic) run; ``heron.build`` asks it for both
and the rest of the run never knows the difference.

- ``LocalExecutor``: everything in this process (the default).
- ``RayExecutor`` (``heron.cluster.ray_executor``): engines and trainer ranks as Ray actors
  in a placement group; returns driver-side stand-ins implementing the same endpoints.

An executor receives only what it needs: the engine and trainer specs (their own config
sections) and the residency settings. Shutdown order (``close``): engine actors close their
engines (a server engine stops its server), actors are killed, the placement group removed,
then Ray is shut down if this executor started it. ``close`` is idempotent and also runs at
interpreter exit.
"""

from __future__ import annotations

from typing import Protocol

from heron.config.tracking import ProfileConfig
from heron.critic.build import CriticSpec, build_critic
from heron.critic.critic import Critic
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import ResidencySettings, attach, attach_residency
from heron.rollout.engine import RolloutEngine
from heron.rollout.registry import EngineSpec, build_engine
from heron.trainer.build import TrainerSpec, build_trainer
from heron.tracking.profiler import ProfileFiles
from heron.trainer.protocol import Trainer


class Executor(Protocol):
    def engine(self, spec: EngineSpec) -> RolloutEngine: ...

    def trainer(self, spec: TrainerSpec) -> Trainer: ...

    def residency(self, trainer: Trainer, engine: RolloutEngine) -> Coordinator:
        """Attaches sleep/wake to both; returns the run's ``Coordinator``."""
        ...

    def critic(self, spec: CriticSpec, coordinator: Coordinator) -> Critic:
        """The critic (``algo.advantage=gae``) with its residency (offloaded like the trainer), registered
        with the run's ``coordinator``, so colocated it takes turns with the trainer and the engine."""
        ...

    def start_profiles(self, cfg: ProfileConfig) -> None:
        """Starts torch.profiler in every process the executor runs components in, other than
        this one (heron.tracking.profiler)."""
        ...

    def stop_profiles(self) -> dict[str, ProfileFiles]:
        """Stops what ``start_profiles`` started -> each process's profile, by its name."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    def __init__(self, residency: ResidencySettings):
        self.settings = residency

    def engine(self, spec: EngineSpec) -> RolloutEngine:
        return build_engine(spec)

    def trainer(self, spec: TrainerSpec) -> Trainer:
        return build_trainer(spec)

    def residency(self, trainer: Trainer, engine: RolloutEngine) -> Coordinator:
        """Attaches sleep/wake to trainer and engine; offloaded ones rest asleep from here on."""
        return attach_residency(trainer, engine, self.settings)

    def critic(self, spec: CriticSpec, coordinator: Coordinator) -> Critic:
        critic = build_critic(spec)
        attach(critic, "critic", critic.holdings(), offload=self.settings.offload_train,
               coordinator=coordinator, wait_timeout_s=self.settings.wait_timeout_s)
        return critic

    def start_profiles(self, cfg: ProfileConfig) -> None:
        pass  # every component runs in this process: its own profile covers them

    def stop_profiles(self) -> dict[str, ProfileFiles]:
        return {}

    def close(self) -> None:
        pass
