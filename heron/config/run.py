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
    allow_emulated_bf16: bool = doc(
        "Run bfloat16 settings (model.dtype, train.precision, engine.embedded.dtype) on a CPU without "
        "avx512-bf16 or AMX, where torch emulates bf16 many times slower than float32; false: refuse in "
        "one line before anything loads (a GPU without bf16 is always refused).",
        False,
    )

    def __post_init__(self):
        check(self.dir != "", "run.dir must not be empty; set run.dir=<folder>")
