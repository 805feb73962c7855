"""Shared fixtures for all test tiers."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HF folder with the default toy model (random-weight Qwen3, ~0.5 M parameters) and
    its tokenizer trained on addition problems; created once per test session. Read-only:
    tests that change weights load their own copy with ``from_pretrained``."""
    from heron.toy.addition import make_prompts
    from heron.toy.model import ToyModelSpec, create_toy_model

    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    return create_toy_model(tmp_path_factory.mktemp("toy_model"), corpus, ToyModelSpec())


@pytest.fixture(scope="session")
def addition_data(tmp_path_factory) -> dict[str, Path]:
    """Addition prompts as JSONL: 64 train, 6 test and 5 three-digit (hard) ones."""
    from heron.toy.addition import make_prompts, write_jsonl

    folder = tmp_path_factory.mktemp("addition")
    paths = {"train": folder / "train.jsonl", "test": folder / "test.jsonl", "hard": folder / "hard.jsonl"}
    write_jsonl(make_prompts(64, seed=0, max_digits=2), paths["train"])
    write_jsonl(make_prompts(6, seed=1, max_digits=2), paths["test"])
    write_jsonl(make_prompts(5, seed=2, max_digits=3), paths["hard"])
    return paths


# `make test` runs the default tier on two pytest-xdist workers, a file at a time
# (``--dist loadfile``): the tier spends much of its time waiting on child processes (ranks,
# servers, Ray) rather than computing. The files whose tests start Ray form one unit, so one
# worker runs them one after another and two Ray clusters never run at once (tests read Ray's
# processes and sockets; each heron-started Ray takes the machine's two cores as its own).
# That unit is the tier's longest (2026-12-06, 2-core AVX2 EPYC: 778 s of the 846 s both workers
# ran; the other worker ran the other 123 files in the same time), and a third worker made the
# tier slower (17:18 against 14:58): the two cores are what limits it, not waiting.
RAY_FIXTURES = frozenset({"ray_session", "no_ray"})
RAY_FILES = frozenset({  # every test file that starts Ray (the collection check below enforces the fixtures' users)
    "test_interrupt.py", "test_async_mode.py", "test_async_accuracy.py", "test_checkpoint_world_size.py",
    "test_cluster_faults.py", "test_collective_timeout.py", "test_colocated_ray_residency.py", "test_critic_runs.py",
    "test_data_parallel.py", "test_lora_ray.py", "test_ray_checkpoint_crash.py", "test_ray_loopback.py",
    "test_ray_run.py", "test_remote_call_peer_lost.py", "test_remote_user_errors.py",
})


def pytest_collection_modifyitems(config, items):
    unlisted = sorted({i.path.name for i in items if RAY_FIXTURES.intersection(getattr(i, "fixturenames", ()))} - RAY_FILES)
    if unlisted:
        raise pytest.UsageError(f"{unlisted} start Ray (ray_session/no_ray): add them to RAY_FILES in tests/conftest.py")


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (bench/gpu_check.sh on another image) would reject it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with every Ray file in one unit (the scheduler sees test ids only)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if Path(path).name in RAY_FILES else path

    return RayFilesTogether(config, log)
