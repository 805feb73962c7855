"""Which rollout engine generates the samples (``heron.rollout.registry`` lists the backends)."""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class EngineConfig:
    """The rollout engine backend. ``embedded`` decodes with an HF model in the trainer's process
    (the default; a laptop, CI). Other kinds are registered in ``heron.rollout.registry``."""

    kind: str = doc("Rollout engine backend: embedded (in-process HF model) or a kind registered in heron.rollout.registry.", "embedded")

    def __post_init__(self):
        check(self.kind != "", "engine.kind must not be empty; use engine.kind=embedded")
