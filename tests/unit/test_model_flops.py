"""Model FLOPs (heron.trainer.model_flops): the formula by hand, its parts against torch's own FLOP
counter on a real model, what the trainer reports as ``model_flops`` (the rows it ran, forwards
and backwards), and the run's ``perf/train_tflops`` / ``perf/mfu`` from it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForCausalLM, Qwen3Config

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.rl_run import _train_rate
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer
from heron.trainer.model_flops import ForwardCost, forward_cost
from heron.trainer.zero_advantage import rows_with_gradient
from tests.unit.test_answer_head import OwnForward
from tests.unit.test_zero_advantage import _half_equal_groups, _trainer


def test_forward_and_training_flops_by_hand():
    cost = ForwardCost(per_token=10.0, per_pair=2.0)
    # T=1: 10 + 2*1; T=3: 30 + 2*6 (a causal forward over 3 tokens attends 1 + 2 + 3 pairs)
    assert float(cost.forward(torch.tensor([1, 3]))) == 54.0
    assert float(cost.training(torch.tensor([1, 3]))) == 162.0
    assert float(cost.forward(torch.tensor([], dtype=torch.long))) == 0.0


def _counted_without_rope(counter: FlopCounterMode) -> int:
    """What ``counter`` counted, less the RoPE table's cos/sin product (``rotary_emb``). That product
    is not model maths (no weights, no gradient, one [D/2] x [T] outer product per forward), and
    whether torch counts it depends on transformers: 5.17 builds the table with a matmul (112
    FLOPs for this file's models), 5.24 does not, so the comparisons below leave it out."""
    rope = sum(sum(counts.values()) for name, counts in counter.get_flop_counts().items()
               if name.endswith(".rotary_emb"))
    return counter.get_total_flops() - rope


@pytest.mark.parametrize("tied", [True, False])
def test_the_cost_parts_are_what_torch_counts_for_the_model(tied):
    """torch's FlopCounterMode over a forward and backward of a Qwen3 model with eager attention
    (plain matmuls, the full T x T scores: T^2 pairs a row, not the causal T (T + 1) / 2) counts
    3 x (2 x the linears' weights per token + per_pair per pair), leaving out the RoPE table's
    product (``_counted_without_rope``). per_token also holds the norms' weights (the estimate
    counts every non-embedding parameter), 2 FLOPs each per token."""
    config = Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=tied)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    rows, length = 3, 7
    input_ids = torch.randint(0, config.vocab_size, (rows, length))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids).logits.sum().backward()
    cost = forward_cost(model)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    expected = 3 * (2 * linear * rows * length + cost.per_pair * rows * length * length)
    assert _counted_without_rope(counter) == expected
    norms = sum(m.weight.numel() for m in model.modules() if type(m).__name__.endswith("RMSNorm"))
    assert cost.per_token == 2 * (linear + norms)
    assert cost.per_pair == 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim


@pytest.mark.parametrize("tied", [True, False])
def test_without_head_leaves_out_the_output_heads_2VH(tied):
    """``head_per_token`` is the head's 2 V H, tied or not, and ``without_head`` removes exactly it:
    what is left is every other linear and norm weight, twice."""
    config = Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=tied)
    model = AutoModelForCausalLM.from_config(config)
    cost = forward_cost(model)
    assert cost.head_per_token == 2 * 97 * 64
    body = sum(m.weight.numel() for m in model.modules()
               if (isinstance(m, torch.nn.Linear) and m is not model.lm_head) or type(m).__name__.endswith("RMSNorm"))
    assert cost.without_head() == replace(cost, per_token=2.0 * body, head_per_token=0.0)


def test_the_shared_layout_choice_weighs_the_head_only_where_it_runs_at_every_position(toy_model_dir):
    """With the head at the answer positions only, both layouts run it at the same positions, so
    ``train.share_prompts`` chooses on the rest of the model; a model that keeps the whole head
    (here: a class with a forward of its own) runs it at every packed position, so it counts."""
    answers = _trainer(toy_model_dir, share_prompts=True)
    assert answers._answers_only and answers.flops.head_per_token > 0
    assert answers._share_cost == answers.flops.without_head()
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    model.__class__ = OwnForward  # the toy model is a Qwen3ForCausalLM
    whole = PolicyTrainer(model, TrainConfig(share_prompts=True), PolicyObjective(AlgoConfig()), total_steps=1)
    assert not whole._answers_only
    assert whole._share_cost == whole.flops


def test_with_lora_only_the_adapters_weights_get_gradients():
    """LoRA (heron.lora, every linear but the head): the frozen base weights get no weight gradient,
    so training counts (2 per_token + 2 x the adapters' weights) per token. torch's counter agrees
    exactly once layer 0's q, k, v projections (base and A) are left out of the backward's input
    gradient: their input comes from the frozen embedding, so autograd skips it, which the
    estimate does not model (module docstring)."""
    from heron.config.lora import LoraConfig
    from heron.lora import apply_lora

    config = Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = apply_lora(AutoModelForCausalLM.from_config(config), LoraConfig(enabled=True, rank=4))
    rows, length = 3, 7
    with FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, config.vocab_size, (rows, length))).logits.sum().backward()
    cost = forward_cost(model)
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert cost.weight_grads_per_token == 2 * adapters < cost.per_token
    first_qkv = sum(m.weight.numel() for name, m in model.named_modules()  # base_layer and lora_A, not lora_B
                    if isinstance(m, torch.nn.Linear) and ".layers.0.self_attn." in name and "lora_B" not in name
                    and any(f".{proj}." in name for proj in ("q_proj", "k_proj", "v_proj")))
    lengths = torch.full((rows,), length)
    skipped = 2 * first_qkv * rows * length  # the input gradient of layer 0's q, k, v (base and A)
    norms = sum(m.weight.numel() for m in model.modules() if type(m).__name__.endswith("RMSNorm"))
    full_scores = 3 * cost.per_pair * rows * (length * length - length * (length + 1) // 2)  # eager: T^2 pairs
    not_matmuls = 2 * 2 * norms * rows * length  # the norms' weights in per_token, forward and input gradient
    assert _counted_without_rope(counter) == float(cost.training(lengths)) - skipped + full_scores - not_matmuls


def _trained(trainer, batch) -> tuple[float, torch.Tensor]:
    flops = trainer.train(batch)["model_flops"]
    return flops, batch.attention_mask.sum(dim=-1)  # [B] tokens of each row


def test_the_trainer_counts_the_rows_it_trains(toy_model_dir):
    """One on-policy step: a forward and backward of each row with an advantage (the others are
    skipped, heron.trainer.zero_advantage); every row without the skip. The trainer sums per
    micro-batch in float32, so up to float32 round-off of a few dozen additions (rel 1e-6)."""
    batch = _half_equal_groups(toy_model_dir)
    trainer = _trainer(toy_model_dir)
    flops, lengths = _trained(trainer, batch)
    rows = rows_with_gradient(batch.advantages, batch.loss_mask)
    assert rows == [0, 1, 2, 3, 8, 9, 10, 11]
    assert flops == pytest.approx(float(trainer.flops.training(lengths[rows])), rel=1e-6)
    every_row, lengths = _trained(_trainer(toy_model_dir, skip_zero_advantage=False), batch)
    assert every_row == pytest.approx(float(trainer.flops.training(lengths)), rel=1e-6)
    assert every_row > flops


def test_a_separate_old_logprob_forward_is_counted_forward_only(toy_model_dir):
    """Two steps a rollout: pi_old comes from a no-grad forward over the rows with an advantage
    (heron.trainer.old_logprobs), then each mini-batch trains its rows with one."""
    batch = _half_equal_groups(toy_model_dir)
    trainer = _trainer(toy_model_dir, steps_per_rollout=2)
    flops, lengths = _trained(trainer, batch)
    rows = [0, 1, 2, 3, 8, 9, 10, 11]  # mini-batches 0..7 and 8..15: each keeps its group with an advantage
    expected = trainer.flops.forward(lengths[rows]) + trainer.flops.training(lengths[rows])
    assert flops == pytest.approx(float(expected), rel=1e-6)
    # the count restarts with each train() call
    again = replace(batch, advantages=batch.advantages.clone())
    assert trainer.train(again)["model_flops"] == pytest.approx(flops, rel=1e-6)


def test_train_tflops_and_mfu_from_the_ranks_model_flops():
    # 2 ranks ran 4e12 FLOPs in all in 0.5 s: 8 TFLOP/s, 4 a device: half an 8 TFLOP/s peak
    assert _train_rate(4e12, 0.5, ranks=2, peak_tflops=8.0) == {"perf/train_tflops": 8.0, "perf/mfu": 0.5}
    assert _train_rate(4e12, 0.5, ranks=1, peak_tflops=0.0) == {"perf/train_tflops": 8.0}
    assert _train_rate(None, 0.5, ranks=1, peak_tflops=8.0) == {}
