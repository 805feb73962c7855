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
