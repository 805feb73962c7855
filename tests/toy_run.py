"""The overrides of a tiny toy run, shared by the tests that start real runs (in process or as
`heron train` subprocesses): 2 prompts x 2 samples, 4 new tokens, no eval, quiet tracking."""

from __future__ import annotations

from pathlib import Path


def toy_run_overrides(model_dir: Path, data_path: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={model_dir}", f"data.path={data_path}", "eval.path=", f"run.dir={run_dir}",
        "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "train.micro_batch_size=2",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *extra,
    ]
