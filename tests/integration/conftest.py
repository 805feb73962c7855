"""Integration fixtures: one small Ray (num_cpus=2, no dashboard, loopback only: heron's own
local start) shared across tests, always shut down at the end, also when a test fails."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _ray_shutdown_at_end(request):
    import ray

    request.addfinalizer(ray.shutdown)


@pytest.fixture
def ray_session(_ray_shutdown_at_end):
    """A Ray shared by the tests that ask for it (started once, ~5 s, re-started if a test
    that owns its own Ray shut it down); shut down at the end of the session, also on failure."""
    import ray

    from heron.cluster.ray_session import start_local_ray

    if not ray.is_initialized():
        start_local_ray(num_cpus=2, log_to_driver=False)
    return ray


@pytest.fixture
def no_ray():
    """For tests of a run that starts and stops Ray itself."""
    import ray

    ray.shutdown()
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def toy_data_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from heron.toy.addition import write_splits

    folder = tmp_path_factory.mktemp("toy_data")
    write_splits(folder, seed=0, max_digits=2, num_train=64, num_test=8)
    return folder / "train.jsonl"
