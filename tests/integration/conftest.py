"""Integration fixtures: one small Ray session per test module (num_cpus=2, no dashboard),
always shut down, also when a test fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ray_session(request):
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    request.addfinalizer(ray.shutdown)
    return ray


@pytest.fixture(scope="session")
def toy_data_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from heron.toy.addition import write_splits

    folder = tmp_path_factory.mktemp("toy_data")
    write_splits(folder, seed=0, max_digits=2, num_train=64, num_test=8)
    return folder / "train.jsonl"
