"""The executor decides where the engine and the trainer run; ``build_components`` asks it
for both and the rest of the run never knows the difference.

- ``LocalExecutor``: everything in this process (the default).
- ``RayExecutor`` (``heron.cluster.ray_executor``): engines and trainer ranks as Ray actors
  in a placement group; returns driver-side stand-ins with the same verbs.

Shutdown order (``close``): actors are killed, the placement group removed, then Ray is shut
down if this executor started it. ``close`` is idempotent and also runs at interpreter exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from heron.config.root import HeronConfig


class Executor(Protocol):
    def engine(self, pad_token_id: int): ...

    def trainer(self, policy_loss=None): ...

    def residency(self, trainer, engine):
        """Attaches sleep/wake to both; returns the run's ``Coordinator``."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    def __init__(self, cfg: "HeronConfig"):
        self.cfg = cfg

    def engine(self, pad_token_id: int):
        from heron.components import build_engine

        return build_engine(self.cfg, pad_token_id)

    def trainer(self, policy_loss=None):
        from heron.components import build_policy_trainer

        return build_policy_trainer(self.cfg, policy_loss)

    def residency(self, trainer, engine):
        from heron.components import build_residency

        return build_residency(self.cfg, trainer, engine)

    def close(self) -> None:
        pass


def build_executor(cfg: "HeronConfig") -> Executor:
    if cfg.cluster.backend == "ray":
        from heron.cluster.ray_executor import RayExecutor

        return RayExecutor(cfg)
    return LocalExecutor(cfg)
