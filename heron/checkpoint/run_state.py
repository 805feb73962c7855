"""What a checkpoint holds besides its tensors, as typed records: ``state.json`` is a ``RunState``.

- ``TrainerState``: what a trainer restores besides model + optimizer tensors (the DCP shards):
  its policy version and LR scheduler. ``Trainer.save_state`` returns it, ``load_state`` restores it.
- ``Fingerprint``: what a checkpoint must agree on with the run that loads it (config parts that
  change what the next rollouts compute, model shapes and dtypes, optimizer structure), compared
  before any tensor is loaded (``heron.checkpoint.fingerprint``).
- ``RunState``: the run around the trainer: rollout id, data source cursor and buffer, every RNG,
  the config and its digest.

The JSON layout is ``format`` 1, unchanged since the first checkpoints: ``to_json`` writes it and
``from_json`` reads it with one-line errors naming what is missing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from heron.checkpoint.errors import CheckpointError

FORMAT = 1
SAMPLING_SEEDS = "derive_seed(run_seed, rollout_id, prompt_id, sample_index) -- heron.seeding"


@dataclass(frozen=True)
class TrainerState:
    """Trainer state outside its tensors. Example: ``TrainerState(version=12, scheduler={...})``."""

    version: int
    """Policy version: ``train`` calls applied to the weights."""
    scheduler: dict[str, Any]
    """The LR scheduler's ``state_dict`` (JSON-able)."""


@dataclass(frozen=True)
class Fingerprint:
    config: dict[str, Any] = field(default_factory=dict)
    """Dotted key -> value of the resume-critical config parts."""
    model: dict[str, Any] = field(default_factory=dict)
    """State-dict key -> {shape, dtype} (global shapes: the same for any world size)."""
    optimizer: dict[str, Any] = field(default_factory=dict)
    """Optimizer class, param groups by parameter name, hyperparameter names."""


@dataclass(frozen=True)
class RunState:
    """``state.json`` of a checkpoint after ``rollout_id``."""

    rollout_id: int
    policy_version: int
    run_seed: int
    sampler: dict[str, Any]
    """The data source's ``state_dict()`` (epoch, cursor, buffered prompts)."""
    rng: dict[str, Any]
    """python, numpy and torch generators (``heron.checkpoint.rng``)."""
    config: dict[str, Any]
    config_digest: str
    config_digest_covers: list[str]
    trainer: TrainerState
    fingerprint: Fingerprint
    format: int = FORMAT
    sampling_seeds: str = SAMPLING_SEEDS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> "RunState":
        """Reads a ``state.json`` dict; raises a one-line ``CheckpointError`` naming ``where``."""
        if not isinstance(data, dict):
            raise CheckpointError(f"checkpoint {where} is corrupt: state.json is not a JSON object")
        if data.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {where} has state format {data.get('format')!r}; this heron reads format {FORMAT}")
        try:
            trainer = TrainerState(**data["trainer"])
            fingerprint = Fingerprint(**data["fingerprint"])
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k not in ("trainer", "fingerprint")}
        except (KeyError, TypeError) as e:
            raise CheckpointError(f"checkpoint {where} is corrupt: state.json lacks or mistypes {e}") from None
        return cls(**fields, trainer=trainer, fingerprint=fingerprint)
