from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class RunConfig:
    """Where a run writes and how it is seeded."""

    dir: str = doc("Output folder: metrics.jsonl, plots, logs, checkpoints.", "runs/default")
    seed: int = doc("Seed for data order, sampling and initialisation; same seed, same run.", 0)
    device: Literal["auto", "cpu", "cuda"] = doc(
        "Device of the trainer, reference model and embedded engine with cluster.backend=local: auto = "
        "cuda when a CUDA device is visible, else cpu (on Ray, cluster.device places the actors).",
        "auto",
    )

    def __post_init__(self):
        check(self.dir != "", "run.dir must not be empty; set run.dir=<folder>")
