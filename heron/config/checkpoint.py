from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc


@dataclass(frozen=True)
class CheckpointConfig:
    """When and where a run saves itself, and where it resumes from (see docs/checkpoints.md)."""

    enabled: bool = doc("Save checkpoints (every `interval` rollouts and always after the last).", True)
    dir: str = doc("Checkpoint folder; empty means <run.dir>/checkpoints.", "")
    interval: int = doc("Save after every N rollouts (and always after the last one); 0 = only at the end.", 10)
    async_: bool = doc(
        "Copy the tensors to host memory and write the files in a background thread; the loop waits "
        "for the previous save if it is still running, and its next optimizer step or sleep waits for "
        "the copy.",
        True,
        key="async",
    )
    keep_last: int = doc("Keep the newest N committed checkpoints (older ones are deleted after a newer commit); 0 = keep all.", 3)
    load: str = doc(
        "Resume from: 'auto' (newest complete checkpoint in `dir`, if any), 'none' (start fresh), "
        "or the path of one checkpoint folder.",
        "auto",
    )
    hf_export: bool = doc("Also write an HF folder (hf/: safetensors, config, tokenizer) into every checkpoint.", False)

    def __post_init__(self):
        check(self.interval >= 0, f"checkpoint.interval must be >= 0, got {self.interval}")
        check(self.keep_last >= 0, f"checkpoint.keep_last must be >= 0 (0 keeps all), got {self.keep_last}")
        check(self.load != "", "checkpoint.load must be 'auto', 'none' or a checkpoint folder path")

    def folder(self, run_dir: str) -> str:
        """The checkpoint folder of a run: ``dir``, or ``<run.dir>/checkpoints``."""
        return self.dir or f"{run_dir}/checkpoints"
