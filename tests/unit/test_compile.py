"""train.compile (heron.trainer.compile): through the trainer's real build path, the compiled
decoder layers give the eager update and metrics within the derived round-off (float32: the same
sums in another order, tests/tolerance.py rule 2; bf16 autocast: the bf16 bound), one graph serves
every layer and every batch shape (no recompile when the rows or the length change), and a
model or a machine that cannot compile is refused in one line before any weight loads."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoConfig, AutoModelForCausalLM

from heron.config.algo import AlgoConfig
from heron.config.base import ConfigError
from heron.config.critic import CriticConfig
from heron.config.lora import LoraConfig
from heron.config.model import ModelConfig
from heron.config.root import load_config
from heron.config.train import TrainConfig
from heron.critic.build import CriticSpec, build_critic
from heron.preflight.compile import check_compile
from heron.trainer.build import TrainerSpec, build_trainer
from heron.trainer.compile import decoder_layers
from heron.trainer.logprobs import forward_logprobs
from tests.tolerance import assert_bf16_logprobs_close, assert_updates_close, gamma, reduction_length
from tests.unit.test_activation_checkpointing import _NoCheckpointingConfig, _NoCheckpointingModel
from tests.unit.test_critic_precision import _critic_batch
from tests.unit.test_packing import assert_same_update
from tests.unit.test_trainer import _rollout


def _build(model_dir, compile_model: bool, **train_kw):
    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    train = TrainConfig(lr=1e-3, eps=1.0, micro_batch_size=16, compile=compile_model, **train_kw)
    return build_trainer(TrainerSpec(model=ModelConfig(path=str(model_dir)), train=train, algo=AlgoConfig(),
                                     policy_loss="", total_steps=10, temperature=1.0, max_response_tokens=6, seed=0,
                                     allow_emulated_bf16=True))  # bf16 on any CPU (emulated where it has none)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.portability
@pytest.mark.parametrize("share_prompts", [True, False], ids=["shared-prompts", "padded-rows"])
def test_compiled_update_equals_eager_and_one_graph_serves_every_layer_and_shape(toy_model_dir, share_prompts):
    _, _, batch = _rollout(toy_model_dir)
    compiled = _build(toy_model_dir, True, share_prompts=share_prompts)
    layers = decoder_layers(compiled.model)
    assert len(layers) == compiled.model.config.num_hidden_layers > 1
    assert all(layer._compiled_call_impl is not None for layer in layers)
    # the shared-prompt attention (heron.trainer.grouped_attention) runs inside the compiled layers
    assert (compiled._shared_layout(batch) is not None) == share_prompts
    assert_same_update(compiled, _build(toy_model_dir, False, share_prompts=share_prompts), batch)
    # one frame compiled: the L layers share a graph (parameters are its inputs)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    rows = range(len(batch) // 2)  # other rows, cut to their own longest: another length
    shorter = batch.take(rows, int(batch.attention_mask[list(rows)].sum(dim=1).max()))
    assert shorter.input_ids.shape[1] < batch.input_ids.shape[1]
    # padded still where the last position is not run (heron.trainer.logprobs): a micro-batch
    # without padding takes transformers' mask-free path, a graph of its own
    assert not bool(shorter.attention_mask[:, :-1].all())
    compiled.train(shorter)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])  # no recompile
    assert counters["stats"]["calls_captured"] > 0


def test_a_run_whose_batches_switch_layout_compiles_one_graph_per_layout(toy_model_dir):
    """A run's micro-batches take the shared-prompt layout only where it pays (long answers of
    uneven length, say), so a run can go padded, shared, padded. The attention dispatcher the
    shared layout needs is installed when the layers are compiled, before any is traced: a
    graph traced against transformers' own ``sdpa`` would fail its guard once the dispatcher
    replaced it, and compile a third graph (measured: a 256-token bench run recompiled twice)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("sdpa", sdpa_attention_forward)  # as a fresh process has it
    _, _, batch = _rollout(toy_model_dir)
    trainer = _build(toy_model_dir, True, share_prompts=True)
    one_per_prompt = batch.take(range(0, len(batch), 4), batch.input_ids.shape[1])  # nothing to share
    assert trainer._shared_layout(one_per_prompt) is None and trainer._shared_layout(batch) is not None
    for step_batch in (one_per_prompt, batch, one_per_prompt):
        trainer.train(step_batch)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


@pytest.mark.portability
def test_compiled_critic_values_and_update_equal_eager(toy_model_dir):
    """train.compile compiles the critic's backbone layers too (heron.critic.build): its values lie
    within the float32 round-off of eager's (norm-wise, rule 2: |dV_t| <= |w| |dh_t| <= |w| 2 gamma(n)
    |h_t|), and so does its update (rule 3)."""
    def build(compile_model: bool):
        critic = build_critic(CriticSpec(critic=CriticConfig(lr=1e-2, eps=1.0, grad_clip=1.0),
                                         model=ModelConfig(path=str(toy_model_dir)), seed=0,
                                         train=TrainConfig(micro_batch_size=8, compile=compile_model)))
        with torch.no_grad():  # a non-zero head: the backbone gets gradients and the values carry it
            head = critic.model.value_head.weight
            head.copy_(torch.linspace(-1, 1, head.numel()).view(1, -1))
        return critic

    batch = _critic_batch(toy_model_dir)
    compiled, eager = build(True), build(False)
    layers = decoder_layers(compiled.model.backbone)
    assert len(layers) == compiled.model.backbone.config.num_hidden_layers > 1
    assert all(layer._compiled_call_impl is not None for layer in layers)
    n = reduction_length(eager.model.backbone.config, tokens=batch.input_ids.numel())
    with torch.no_grad():
        hidden = eager.model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    bound = 2 * gamma(n) * eager.model.value_head.weight.norm() * hidden[:, :-1].norm(dim=-1) * batch.loss_mask
    difference = (compiled.values(batch) - eager.values(batch)).abs()  # [B, L-1]
    assert bool((difference <= bound).all()), float((difference - bound).max())
    initial = {k: v.clone() for k, v in eager.model.state_dict().items()}
    compiled.train(batch)
    eager.train(batch)
    assert_updates_close(compiled.model.state_dict(), eager.model.state_dict(), initial, n=n, steps=1)
    # one graph per grad mode (the values' no-grad forward, the train step's), shared by the layers
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


@pytest.mark.portability
def test_compiled_bf16_logprobs_are_within_the_bf16_bound(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    eager32 = _build(toy_model_dir, False)
    compiled = _build(toy_model_dir, True, precision="bf16")
    with torch.no_grad():
        expected = eager32.compute_logprobs(batch)
    # the differentiated forward: the graph a train step runs
    logprobs, _ = forward_logprobs(compiled.model, batch.input_ids, batch.attention_mask,
                                   forward_context=compiled._forward_context)
    assert counters["stats"]["unique_graphs"] == 1
    mask = batch.loss_mask.bool()
    assert_bf16_logprobs_close(logprobs.detach()[mask], expected[mask], compiled.model.config)


def test_preflight_refuses_a_model_without_decoder_layers_and_a_machine_without_a_compiler(
        toy_model_dir, tmp_path):
    cfg = load_config(None, [f"model.path={toy_model_dir}", "data.path=p.jsonl", "train.compile=true"])
    assert check_compile(cfg) == "compile: 2 x Qwen3DecoderLayer, one graph; inductor's toolchain found"
    with torch._inductor.config.patch({"cpp.cxx": ("heron-no-such-compiler",)}):
        with pytest.raises(ConfigError, match=r"train.compile=true: no C\+\+ compiler .*set train.compile=false"):
            check_compile(cfg)
        with pytest.raises(RuntimeError, match=r"train.compile=true: no C\+\+ compiler .*set train.compile=false"):
            _build(toy_model_dir, True)  # a Ray rank checks its own device as it builds
    off = load_config(None, [f"model.path={toy_model_dir}", "data.path=p.jsonl", "train.compile=false"])
    assert check_compile(off) is None

    # a model class with no list of layers (one linear head)
    AutoConfig.register(_NoCheckpointingConfig.model_type, _NoCheckpointingConfig, exist_ok=True)
    AutoModelForCausalLM.register(_NoCheckpointingConfig, _NoCheckpointingModel, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": _NoCheckpointingConfig.model_type}))
    no_layers = load_config(None, [f"model.path={tmp_path}", "data.path=p.jsonl", "train.compile=true"])
    with pytest.raises(ConfigError, match="found no decoder-layer list in _NoCheckpointingModel .*set train.compile=false"):
        check_compile(no_layers)

    # PPO with a learned critic: its backbone is compiled too, from model.path or its own critic.path
    gae = [f"model.path={toy_model_dir}", "data.path=p.jsonl", "train.compile=true", "algo.advantage=gae"]
    assert check_compile(load_config(None, gae)) == (
        "compile: 2 x Qwen3DecoderLayer, one graph; the critic's 2 x Qwen3DecoderLayer too; inductor's toolchain found")
    with pytest.raises(ConfigError, match=f"no decoder-layer list in _NoCheckpointingModel \\(critic.path {tmp_path}\\)"):
        check_compile(load_config(None, [*gae, f"critic.path={tmp_path}"]))
    # on Ray the device is known only where each part builds, and each checks its own
    assert check_compile(load_config(None, [*gae, "cluster.backend=ray"])).endswith(
        "too (each trainer rank and the critic's actor check inductor's toolchain as they build)")


@pytest.mark.slow
def test_compiled_lora_update_with_its_reference_equals_eager(toy_model_dir):
    """LoRA: the adapters are traced inside the compiled layers, and the KL term's reference (the
    same layers with the adapters disabled) runs them too."""
    def build(compile_model: bool):
        torch.manual_seed(0)  # LoRA's A starts random
        train = TrainConfig(lr=1e-3, eps=1.0, micro_batch_size=16, compile=compile_model)
        return build_trainer(TrainerSpec(model=ModelConfig(path=str(toy_model_dir), lora=LoraConfig(enabled=True, rank=4)),
                                         train=train, algo=AlgoConfig(kl_coef=0.1), policy_loss="", total_steps=10,
                                         temperature=1.0, max_response_tokens=6, seed=0))

    _, _, batch = _rollout(toy_model_dir)
    assert_same_update(build(True), build(False), batch)
    assert counters["stats"]["calls_captured"] > 0


def test_compile_with_activation_checkpointing_is_refused(toy_model_dir):
    """torch.utils.checkpoint disables dynamo inside a checkpointed layer: the pair would silently
    train eagerly, so both the pre-flight and the builder refuse it."""
    cfg = load_config(None, [f"model.path={toy_model_dir}", "data.path=p.jsonl", "train.compile=true",
                             "train.gradient_checkpointing=true"])
    with pytest.raises(ConfigError, match="train.compile=true with train.gradient_checkpointing=true: .*dynamo disabled"):
        check_compile(cfg)
    with pytest.raises(ValueError, match="train.compile with activation checkpointing on: .*set one of them to false"):
        _build(toy_model_dir, True, gradient_checkpointing=True)


def test_inductor_cache_is_separate_per_cpu_capability(monkeypatch):
    """torch 2.13's inductor cache does not key CPU kernels on ATEN_CPU_CAPABILITY (a kernel cached
    under one failed to build under another): a run with the variable set gets a folder of its
    own, unless the user chose one."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from heron.device import separate_inductor_cache_per_capability

    default = os.path.abspath(default_cache_dir())
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert separate_inductor_cache_per_capability() is None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    for before in (None, default):  # unset, or inductor's default (which inductor writes itself)
        if before is not None:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", before)
        assert separate_inductor_cache_per_capability() == f"{default}_avx2" == os.environ["TORCHINDUCTOR_CACHE_DIR"]
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/of/my/own")
    assert separate_inductor_cache_per_capability() is None
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/of/my/own"
