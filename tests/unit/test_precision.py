"""train.precision=bf16: the forward runs under bf16 autocast while master weights, gradients,
optimizer state, logprobs and the loss stay float32; its logprobs are within the derived bf16
bound of float32 (tests/tolerance.py); bf16 over bfloat16 weights is refused in one line."""

from __future__ import annotations

import pytest
import torch

from heron.config.base import ConfigError
from heron.config.root import load_config
from tests.tolerance import assert_bf16_logprobs_close
from tests.unit.test_packing import _trainer
from tests.unit.test_trainer import _rollout


@pytest.mark.portability
def test_bf16_logprobs_are_float32_and_within_the_bf16_bound(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    fp32, bf16 = _trainer(toy_model_dir), _trainer(toy_model_dir, precision="bf16")
    expected, actual = fp32.compute_logprobs(batch), bf16.compute_logprobs(batch)
    assert actual.dtype == torch.float32
    assert not torch.equal(actual, expected)  # autocast really ran
    assert_bf16_logprobs_close(actual, expected, fp32.model.config)


def test_bf16_keeps_float32_master_weights_grads_and_optimizer_state(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    trainer = _trainer(toy_model_dir, precision="bf16")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    grads = []
    for p in trainer.model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: grads.append(p.grad.dtype))
    metrics = trainer.train(batch)
    assert metrics["grad_norm"] > 0 and grads and set(grads) == {torch.float32}
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    state = [v for s in trainer.optimizer.state.values() for v in s.values() if v.is_floating_point() and v.dim()]
    assert state and {v.dtype for v in state} == {torch.float32}
    assert {v.dtype for v in trainer.host_weights().values()} == {torch.float32}
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_bf16_over_bfloat16_weights_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="train.precision=bf16 keeps float32 master weights.*set model.dtype=float32"):
        load_config(None, ["model.path=m", "data.path=d", "model.dtype=bfloat16", "train.precision=bf16"])
    assert load_config(None, ["model.path=m", "data.path=d", "train.precision=bf16"]).train.precision == "bf16"


def test_packing_and_chunking_knobs_are_checked():
    with pytest.raises(ConfigError, match="train.max_tokens_per_micro_batch must be >= 0"):
        load_config(None, ["model.path=m", "data.path=d", "train.max_tokens_per_micro_batch=-1"])
    with pytest.raises(ConfigError, match="train.logprob_chunk_size must be >= 0"):
        load_config(None, ["model.path=m", "data.path=d", "train.logprob_chunk_size=-2"])
    # packed micro-batches do not need micro_batch_size to divide the mini-batch
    cfg = load_config(None, ["model.path=m", "data.path=d", "train.micro_batch_size=5", "train.max_tokens_per_micro_batch=512"])
    assert cfg.train.max_tokens_per_micro_batch == 512
