"""train.compile under FSDP2, with two real gloo ranks in subprocesses: each rank's decoder layers
are compiled before fully_shard wraps them (as build_trainer orders it), the sharded layers' hooks
run around the compiled calls, and every rank's update and metrics equal the eager FSDP2 run's
within the float32 summation-order bound (tests/tolerance.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import ROWS, _batch, _train_counted
from tests.integration.test_old_logprobs_ranks import _trainer as fsdp2_trainer
from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length

WORLD = 2


def _trainer(model_dir: str, compile_model: bool):
    from heron.trainer.compile import compile_decoder_layers

    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return fsdp2_trainer(model_dir, compile_decoder_layers if compile_model else None, eps=1.0, micro_batch_size=ROWS,
                         compile=compile_model)


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    from torch._dynamo.utils import counters

    results = {name: _train_counted(_trainer(model_dir, name == "compiled"), rank, tmp / f"{name}.pt")
               for name in ("eager", "compiled")}
    results["calls_captured"] = counters["stats"]["calls_captured"]
    return results


@pytest.mark.slow
def test_compiled_fsdp2_ranks_give_the_eager_update(toy_model_dir, tmp_path):
    from transformers import AutoConfig

    results = on_gloo_ranks(_scenarios, WORLD, tmp_path, str(toy_model_dir))
    config = AutoConfig.from_pretrained(toy_model_dir)
    batch = _batch(config.vocab_size, 0)
    n = reduction_length(config, tokens=WORLD * batch.input_ids.numel())
    for rank, result in enumerate(results):
        assert result["calls_captured"] > 0, rank
        eager, compiled = result["eager"]["metrics"], result["compiled"]["metrics"]
        for key in ("loss", "grad_norm"):
            magnitude = abs(eager[key]) + (math.log(config.vocab_size) if key == "loss" else 0.0)
            assert_sums_close(compiled[key], eager[key], n=n, magnitude=magnitude, what=f"rank {rank} {key}")
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32).state_dict()
    eager, compiled = (torch.load(tmp_path / f"{name}.pt", weights_only=True) for name in ("eager", "compiled"))
    assert_updates_close(compiled, eager, initial, n=n, steps=1)
