"""Fixtures of the lifecycle tier: the toy model as an in-memory template, pairs, a batch."""

from __future__ import annotations

import pytest
import torch

from residency_pair import Pair, train_batch
from heron.trainer.batch import TrainBatch


@pytest.fixture(scope="session")
def toy_template(toy_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)


@pytest.fixture
def make_pair(toy_template):
    return lambda **kw: Pair(toy_template, **kw)


@pytest.fixture
def batch(toy_template) -> TrainBatch:
    return train_batch(toy_template.config.vocab_size)
