"""Short real runs on the toy model: a config builder shared by the e2e tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def run_config(toy_model_dir, addition_data, tmp_path):
    """``run_config(*overrides)`` -> a validated HeronConfig for a 2-rollout toy run."""
    from heron.config.root import load_config

    def make(*overrides: str):
        return load_config(None, [
            f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={tmp_path / 'run'}",
            "rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=3",
            "rollout.max_new_tokens=4", "train.micro_batch_size=6", "eval.interval=0",
            "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *overrides,
        ])

    return make
