"""The KL reference of a LoRA policy is the policy with its adapters off (heron.lora.AdaptersDisabled),
not a second copy of the base model: through the real build path (build_trainer) with the real
peft, its logprobs equal a separately loaded ``model.path`` model's bit for bit (after training,
when the adapters do change the policy), the trainer holds no reference tensors, the policy's
mode and trainable adapters are untouched, and a run with KL trains bit-identically to one with
a separate reference copy."""

from __future__ import annotations

import torch

from heron.config.algo import AlgoConfig
from heron.config.lora import LoraConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.lora import apply_lora, engine_view
from heron.models import load_model
from heron.trainer.build import TrainerSpec, build_trainer
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer
from tests.unit.test_trainer import _rollout

ALGO = AlgoConfig(kl_coef=0.5)
TRAIN = TrainConfig(lr=0.05, micro_batch_size=8)
LORA = LoraConfig(enabled=True, rank=4, alpha=8.0, dropout=0.1)


def _spec(model_dir) -> TrainerSpec:
    return TrainerSpec(model=ModelConfig(path=str(model_dir), lora=LORA), train=TRAIN, algo=ALGO, policy_loss="",
                       total_steps=10, temperature=1.0, max_response_tokens=6, seed=0)


def _with_a_separate_copy(model_dir) -> PolicyTrainer:
    """What build_trainer did before: the same policy, and the base model loaded a second time."""
    torch.manual_seed(0)
    model = apply_lora(load_model(str(model_dir), "float32"), LORA)
    return PolicyTrainer(model, TRAIN, PolicyObjective(ALGO, max_response_tokens=6), total_steps=10,
                         reference=load_model(str(model_dir), "float32"), engine_view=engine_view(LORA))


def _built(model_dir) -> PolicyTrainer:
    torch.manual_seed(0)  # LoRA's A starts random
    return build_trainer(_spec(model_dir))


def test_the_reference_is_the_base_model_and_holds_nothing(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    trainer = _built(toy_model_dir)
    trainer.train(batch)  # B leaves 0: the adapters now change the policy
    reference = trainer.compute_logprobs(batch, reference=True)
    base = _with_a_separate_copy(toy_model_dir).compute_logprobs(batch, reference=True)
    assert torch.equal(reference, base)
    assert not torch.equal(trainer.compute_logprobs(batch), reference)  # the adapters are back on after it
    assert trainer.model.training
    adapters = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert adapters and all("lora_" in name for name in adapters)
    assert trainer.holdings().inventory()["reference"] == []  # no second copy of the weights


def test_kl_training_equals_the_run_with_a_separate_reference_copy(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    view, copy = _built(toy_model_dir), _with_a_separate_copy(toy_model_dir)
    for step in range(2):
        torch.manual_seed(step)  # the same LoRA dropout masks on both sides (loading draws from the RNG)
        view_metrics = view.train(batch)
        torch.manual_seed(step)
        copy_metrics = copy.train(batch)
        assert view_metrics == copy_metrics
    assert view_metrics["kl"] > 0  # step 2: the adapters moved the policy off the reference
    view_state, copy_state = view.model.state_dict(), copy.model.state_dict()
    assert view_state.keys() == copy_state.keys()
    assert [k for k in view_state if not torch.equal(view_state[k], copy_state[k])] == []
