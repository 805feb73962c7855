"""train.gradient_checkpointing (issue 12, item 2): through the trainer's real build path
(build_trainer), each decoder layer's modules run again in the backward -- the sign that
checkpointing is on -- and the rollout's update is bit-identical to the run without it (the
recompute repeats the same ops on the same inputs), for full training and for LoRA. A model
class without transformers' checkpointing support is refused by the pre-flight."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from heron.config.algo import AlgoConfig
from heron.config.base import ConfigError
from heron.config.lora import LoraConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.preflight.activation_checkpointing import check_activation_checkpointing
from heron.trainer.build import TrainerSpec, build_trainer
from tests.unit.test_trainer import _rollout


def _spec(model_dir, checkpointing: bool, lora: bool) -> TrainerSpec:
    return TrainerSpec(
        model=ModelConfig(path=str(model_dir), lora=LoraConfig(enabled=lora, rank=4)),
        train=TrainConfig(lr=1e-3, micro_batch_size=4, gradient_checkpointing=checkpointing),
        algo=AlgoConfig(), policy_loss="", total_steps=10, temperature=1.0, max_response_tokens=6, seed=0,
    )


def _train(model_dir, batch, checkpointing: bool, lora: bool) -> tuple[dict, dict, int]:
    torch.manual_seed(0)  # LoRA's A starts random
    trainer = build_trainer(_spec(model_dir, checkpointing, lora))
    layer = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.ModuleList))[0]
    # transformers checkpoints the layer's forward (not __call__): its sub-modules run again; a
    # pre-hook, as the recompute stops once the last saved tensor is back (before forwards return)
    calls = []
    hook = layer.mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    metrics = trainer.train(batch)
    hook.remove()
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    return weights, metrics, len(calls)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_checkpointed_training_recomputes_each_layer_and_is_bit_identical(toy_model_dir, lora):
    _, _, batch = _rollout(toy_model_dir)
    plain, plain_metrics, plain_calls = _train(toy_model_dir, batch, checkpointing=False, lora=lora)
    ckpt, ckpt_metrics, ckpt_calls = _train(toy_model_dir, batch, checkpointing=True, lora=lora)
    assert ckpt_calls == 2 * plain_calls > 0  # one forward per micro-batch, plus its recompute
    assert plain.keys() == ckpt.keys()
    changed = [k for k in plain if not torch.equal(plain[k], ckpt[k])]
    assert changed == []
    assert ckpt_metrics["loss"] == plain_metrics["loss"]
    assert ckpt_metrics["grad_norm"] == plain_metrics["grad_norm"]


class _NoCheckpointingConfig(PretrainedConfig):
    model_type = "heron-test-no-checkpointing"


class _NoCheckpointingModel(PreTrainedModel):
    config_class = _NoCheckpointingConfig
    supports_gradient_checkpointing = False

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = torch.nn.Linear(4, 4)


def test_preflight_refuses_a_model_without_checkpointing_support(toy_model_dir, tmp_path):
    AutoConfig.register(_NoCheckpointingConfig.model_type, _NoCheckpointingConfig, exist_ok=True)
    AutoModelForCausalLM.register(_NoCheckpointingConfig, _NoCheckpointingModel, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": _NoCheckpointingConfig.model_type}))
    with pytest.raises(ConfigError, match="_NoCheckpointingModel .* does not support activation checkpointing.*"
                                          "set train.gradient_checkpointing=false"):
        check_activation_checkpointing(TrainConfig(gradient_checkpointing=True), ModelConfig(path=str(tmp_path)))
    check_activation_checkpointing(TrainConfig(gradient_checkpointing=False), ModelConfig(path=str(tmp_path)))
    check_activation_checkpointing(TrainConfig(gradient_checkpointing=True), ModelConfig(path=str(toy_model_dir)))
