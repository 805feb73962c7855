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


@pytest.fixture(scope="session")
def micro_template(toy_template):
    """The toy model's architecture and vocabulary at the smallest size (1 layer, hidden 16):
    ~25x cheaper per operation, for the property runs, which multiply operation sequences,
    not model size (the toy model took ~9 CPU-minutes for 200 sequences of 6 steps)."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(toy_template.config)
    config.update({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                   "num_key_value_heads": 1, "head_dim": 8, "layer_types": config.layer_types[:1]})
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@pytest.fixture
def make_pair(toy_template):
    return lambda **kw: Pair(toy_template, **kw)


@pytest.fixture
def batch(toy_template) -> TrainBatch:
    return train_batch(toy_template.config.vocab_size)
