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


# `make test` runs the default tier on two pytest-xdist workers with --dist loadgroup: the
# suite spends much of its time waiting on child processes (ranks, servers, Ray) rather than
# computing. A file's tests stay on one worker (module fixtures are built once), and every test
# that starts Ray shares one group, so two Ray clusters never run at once (tests read Ray's
# processes and sockets, and the heron-started Ray assumes the machine's cores are its own).
RAY_FIXTURES = frozenset({"ray_session", "no_ray"})
RAY_FILES = frozenset({"test_interrupt.py", "test_ray_checkpoint_crash.py"})  # Ray started by a child process


def pytest_collection_modifyitems(config, items):
    for item in items:
        uses_ray = RAY_FIXTURES.intersection(getattr(item, "fixturenames", ())) or item.path.name in RAY_FILES
        item.add_marker(pytest.mark.xdist_group("ray" if uses_ray else item.nodeid.split("::")[0]))
