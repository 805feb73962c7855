"""The GPU tier: the CPU-tested code paths on a CUDA device (``run.device=cuda``), and what only
a GPU can show: that sleeping really frees device memory, and bf16 logprob agreement. No Ray.

Not yet run on a GPU when written (the sessions that built it had none): bench/gpu_check.sh runs
this tier first, and docs/gpu.md records its outcome.
"""

from __future__ import annotations

import gc
import math
import shutil

import pytest
import torch

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.device import free_device_bytes, place, resolve
from heron.records import GenerationRequest, SamplingParams
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import attach
from heron.rollout.embedded import EmbeddedEngine
from heron.trainer.batch import TrainBatch
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer
from tests.e2e import test_colocate_offload as cpu_tier

pytestmark = pytest.mark.gpu
CUDA = "run.device=cuda"
RELEASED_FRACTION = 0.9  # issue 12: a sleep gives back at least 90 % of the component's bytes


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return cpu_tier.create_demo_assets(tmp_path_factory.mktemp("assets"))


# --- the seed regression and offload equivalence, on CUDA (same tests as the CPU tier) -----------
@pytest.mark.parametrize("save_mode", ["checkpoint.async=true", "checkpoint.async=false"])
def test_checkpoint_every_rollout_while_asleep_on_cuda(assets, tmp_path, save_mode, monkeypatch):
    monkeypatch.setattr(cpu_tier, "_config", _on_cuda(cpu_tier._config))
    cpu_tier.test_checkpoint_every_rollout_while_asleep_holds_the_awake_weights(assets, tmp_path, save_mode)


def test_colocate_and_offload_is_bit_identical_on_cuda(assets, tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_tier, "_config", _on_cuda(cpu_tier._config))
    cpu_tier.test_full_run_with_colocate_and_offload_is_bit_identical(assets, tmp_path, monkeypatch)


def _on_cuda(config):
    return lambda assets, run_dir, colocate, *overrides: config(assets, run_dir, colocate, *overrides, CUDA)


# --- sleep frees the device memory; wake restores it bit-exactly ----------------------------------
def _model(dtype=torch.float32):
    """A random Qwen3 of ~34 M parameters (134 MB in fp32): far above the allocators' granularity (2 MiB)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512)
    torch.manual_seed(0)
    return place(AutoModelForCausalLM.from_config(config, dtype=dtype), resolve("cuda"))


def _batch(vocab: int, rows: int = 8, length: int = 64) -> TrainBatch:
    g = torch.Generator().manual_seed(1)
    loss_mask = torch.zeros(rows, length - 1)
    loss_mask[:, length // 2 :] = 1
    return TrainBatch(0, 0, [str(i) for i in range(rows)], torch.randint(vocab, (rows, length), generator=g),
                      torch.ones(rows, length, dtype=torch.long), loss_mask, torch.randn(rows, generator=g),
                      torch.zeros(rows, length - 1))


def _attach_offloaded(component, name: str):
    """Residency with offload, as a colocated run attaches it (the component rests asleep from here)."""
    return attach(component, name, component.holdings(), offload=True, coordinator=Coordinator(True), wait_timeout_s=60)


def _free() -> int:
    gc.collect()  # earlier tests' cycles (a residency and its coordinator) hold CUDA tensors until collected
    torch.cuda.synchronize()
    return free_device_bytes(resolve("cuda"))[0]


def _host_copy(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def test_trainer_sleep_frees_weights_grads_and_optimizer_and_wake_restores_them():
    model = _model()
    trainer = PolicyTrainer(model, TrainConfig(micro_batch_size=8), PolicyObjective(AlgoConfig()), total_steps=4)
    residency = _attach_offloaded(trainer, "trainer")
    with residency.resident("probe"):  # awake, as inside train()
        trainer.train(_batch(model.config.vocab_size))  # AdamW state exists now
        for p in model.parameters():  # gradients held, as between backward and step
            p.grad = torch.ones_like(p)
        held = sum(residency.memory_report().values())
        before = _host_copy(trainer.model)
        free_awake = _free()
    freed = _free() - free_awake  # the scope's exit put it back to sleep
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert residency.state.value == "asleep" and held >= 4 * param_bytes  # params + grads + 2 AdamW moments
    assert freed >= RELEASED_FRACTION * held, (freed, held)
    trainer.wake()
    for key, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor.cpu(), before[key]), key


def test_engine_sleep_frees_weights_and_kv_cache_and_wake_restores_them():
    engine = EmbeddedEngine(_model(torch.bfloat16).eval().requires_grad_(False), pad_token_id=0, max_batch_size=64)
    requests = [GenerationRequest(list(range(1, 200)), SamplingParams(max_new_tokens=256, seed=i)) for i in range(64)]
    residency = _attach_offloaded(engine, "engine")
    with residency.resident("probe"):
        weights = sum(residency.memory_report().values())
        engine.generate(requests[:1])  # loads kernels and takes cuBLAS's workspace: memory no sleep returns
        free_before_generate = _free()
        first = engine.generate(requests)
        free_awake = _free()
        kv_cache = free_before_generate - free_awake  # what the KV cache (and its activations) left allocated
        before = _host_copy(engine.model)
    freed = _free() - free_awake
    assert kv_cache > 0, "the KV cache's blocks stay with the allocator after generate (what the sleep must free)"
    assert freed >= RELEASED_FRACTION * (weights + kv_cache), (freed, weights, kv_cache)
    engine.wake()
    for key, tensor in engine.model.state_dict().items():
        assert torch.equal(tensor.cpu(), before[key]), key
    assert [g.tokens for g in engine.generate(requests)] == [g.tokens for g in first]


def test_engine_prefill_groups_and_dropped_rows_on_cuda_match_the_cpu_reference(toy_model_dir):
    """The engine's cache moves on CUDA (prefill groups joined by ``join_caches``, finished rows
    copied out with ``index_select`` into a view of the new buffer), float32, against the old
    decode loop on the CPU: the same tokens, logprobs within the summation-order bound."""
    from tests.reference_decoder import reference_generate
    from tests.unit.test_engine_equivalence import assert_matches_reference, long_prompt_requests

    cpu_model = EmbeddedEngine.from_pretrained(toy_model_dir).model
    pad = cpu_model.config.pad_token_id
    engine = EmbeddedEngine(place(EmbeddedEngine.from_pretrained(toy_model_dir).model, resolve("cuda")), pad_token_id=pad)
    requests = long_prompt_requests()
    expected = reference_generate(cpu_model, pad, requests)
    assert_matches_reference(engine.generate(requests), expected, cpu_model.config, len(requests))


# --- bf16: engine vs trainer logprobs --------------------------------------------------------------
BF16_U = 2.0**-8  # bfloat16 unit round-off (8 significand bits)


def bf16_logprob_tolerance(num_layers: int, max_abs_logit: float, vocab: int) -> float:
    """First-order bound of |engine - trainer| logprob in bf16. On CUDA, bf16 GEMMs and reductions
    accumulate in fp32 (fp32 round-off is 2^16 times smaller: neglected), so the error comes from
    rounding each op's output to bf16: per decoder layer at most 16 roundings on any path (2
    RMSNorms, q, k, v, rotary, scores, softmax, weighted values, o, 2 residual adds, gate, up,
    SiLU*up, down), plus the final norm and lm_head: m = 16 L + 2. Each contributes at most u of
    relative error to the logits, so |d logit| <= m u max|logit| per computation; both sides round
    independently (x2), and a logprob moves by at most 2 max|d logit| (log-softmax is 2-Lipschitz in
    the max norm) -- plus the bf16 rounding of log V in the normaliser."""
    m = 16 * num_layers + 2
    return 2 * 2 * m * BF16_U * max_abs_logit + BF16_U * math.log(vocab)


def test_engine_and_trainer_logprobs_agree_in_bf16():
    model = _model(torch.bfloat16)
    engine = EmbeddedEngine(model.eval().requires_grad_(False), pad_token_id=0)
    prompt = list(range(1, 33))
    [gen] = engine.generate([GenerationRequest(prompt, SamplingParams(max_new_tokens=32, seed=0))])
    trainer = PolicyTrainer(_model(torch.bfloat16), TrainConfig(micro_batch_size=1), PolicyObjective(AlgoConfig()), total_steps=1)
    tokens = torch.tensor([prompt + gen.tokens])
    n = len(gen.tokens)
    loss_mask = torch.zeros(1, tokens.shape[1] - 1)
    loss_mask[0, len(prompt) - 1 :] = 1
    batch = TrainBatch(0, 0, ["0"], tokens, torch.ones_like(tokens), loss_mask, torch.zeros(1), torch.zeros_like(loss_mask))
    trainer_lp = trainer.compute_logprobs(batch)[0, len(prompt) - 1 :]  # [n]
    with torch.no_grad():
        logits = trainer.model(tokens.to(trainer.device)).logits.float()
    tol = bf16_logprob_tolerance(model.config.num_hidden_layers, float(logits.abs().max()), model.config.vocab_size)
    diff = (trainer_lp - torch.tensor(gen.logprobs)).abs().max().item()
    assert trainer_lp.device.type == "cpu" and n > 0
    assert diff <= tol, (diff, tol)


# --- resume across CPU <-> CUDA checkpoints ----------------------------------------------------------
@pytest.mark.parametrize("first, then", [("cpu", "cuda"), ("cuda", "cpu")])
def test_resume_across_devices(assets, tmp_path, first, then, monkeypatch):
    """Two rollouts on ``first``, then the same run extended to three on ``then`` from its checkpoint:
    the resumed run loads the other device's checkpoint, continues at rollout 2 with the policy
    version the checkpoint holds, and its weights right after loading are the saved ones bit-exactly."""
    from heron.checkpoint.reader import find_latest, load_into
    from heron.loop import train

    common = ["checkpoint.interval=1", "colocate=false"]
    records = train(cpu_tier._config(assets, tmp_path / "a", False, *common, f"run.device={first}"))
    assert [r["rollout_id"] for r in records] == [0, 1, 2]
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    latest = find_latest(tmp_path / "b" / "checkpoints")
    resumed = train(cpu_tier._config(assets, tmp_path / "b", False, *common, f"run.device={then}",
                                     "rollout.num_rollouts=4", "checkpoint.load=auto"))
    assert [r["rollout_id"] for r in resumed] == [3] and resumed[0]["policy_version"] == records[-1]["policy_version"] + 1
    saved = _model_like(assets)
    load_into(latest, saved, None)
    assert all(v.device.type == "cpu" for v in saved.state_dict().values())


def _model_like(assets):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(assets["model"])


# --- activation checkpointing (train.gradient_checkpointing) --------------------------------------
def test_activation_checkpointing_lowers_the_steps_peak_memory_with_the_same_loss():
    """8 layers x 8 rows x 512 tokens: the layers' activations (~160 MB each in fp32) dominate
    the step's peak above its start without checkpointing; with it, one layer's plus the layer
    inputs. The first step's forward is the same computation from the same weights, so its loss
    is equal (the backward may use atomics, so later steps and weights are not compared)."""
    from heron.trainer.activation_checkpointing import enable_activation_checkpointing

    peaks, losses = {}, {}
    for on in (False, True):
        model = _model()
        if on:
            enable_activation_checkpointing(model)
        cfg = TrainConfig(micro_batch_size=8, gradient_checkpointing=on)
        trainer = PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=4)
        batch = _batch(model.config.vocab_size, rows=8, length=512)
        losses[on] = trainer.train(batch)["loss"]  # the same initial weights: the same forward
        torch.cuda.synchronize()  # AdamW state exists from here: the measured step allocates only its own
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        trainer.train(batch)
        torch.cuda.synchronize()
        peaks[on] = torch.cuda.max_memory_allocated() - start
        del trainer, model
        torch.cuda.empty_cache()
    assert peaks[True] < 0.8 * peaks[False], peaks
    assert losses[True] == losses[False], losses


# --- train.compile on CUDA (inductor's Triton kernels) ---------------------------------------------
def test_compiled_layers_give_the_eager_loss_and_grad_norm_on_cuda():
    """The decoder layers compiled (heron.trainer.compile) from the same weights on the same batch:
    the first step's loss and grad norm within the float32 summation-order bound of eager's (the
    GPU's reductions are not ordered, so later steps and weights are not compared)."""
    from heron.trainer.compile import compile_decoder_layers
    from tests.tolerance import assert_sums_close, reduction_length

    metrics = {}
    for compiled in (False, True):
        model = _model()
        if compiled:
            assert compile_decoder_layers(model) == model.config.num_hidden_layers
        trainer = PolicyTrainer(model, TrainConfig(micro_batch_size=8, compile=compiled), PolicyObjective(AlgoConfig()),
                                total_steps=4)
        batch = _batch(model.config.vocab_size)
        metrics[compiled] = trainer.train(batch)
        config = model.config
        del trainer, model
        torch.cuda.empty_cache()
    n = reduction_length(config, tokens=batch.input_ids.numel())
    eager, compiled = metrics[False], metrics[True]
    assert_sums_close(compiled["loss"], eager["loss"], n=n, magnitude=abs(eager["loss"]) + math.log(config.vocab_size),
                      what="loss")
    assert_sums_close(compiled["grad_norm"], eager["grad_norm"], n=n, magnitude=eager["grad_norm"], what="grad_norm")


# --- bf16 support and the chunked output head on CUDA -----------------------------------------------
def test_native_bf16_matches_the_compute_capability():
    from heron.device import native_bf16

    assert native_bf16(resolve("cuda")) is (torch.cuda.get_device_capability() >= (8, 0))


def test_chunked_head_holds_less_than_one_whole_logits_tensor_on_cuda():
    """train.logprob_chunk_size on CUDA with Qwen's 152 k vocabulary: the step's peak memory is
    lower than the whole head's by at least one [B, L, V] float32 tensor (the whole head holds the
    logits, their float32 log-softmax and its gradient; the chunks hold B x c x V of each)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from heron.device import peak_allocated, reset_peak
    from heron.trainer.logprobs import forward_logprobs

    device = resolve("cuda")
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=151_936, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=1024)
    model = place(Qwen3ForCausalLM(config), device)
    input_ids = torch.randint(0, config.vocab_size, (4, 512), device=device)  # [B, L]
    peaks = {}
    for chunk in (0, 64):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        reset_peak(device)
        base = torch.cuda.memory_allocated(device)
        logprobs, entropy = forward_logprobs(model, input_ids, torch.ones_like(input_ids), with_entropy=True, chunk_size=chunk)
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
        peaks[chunk] = peak_allocated(device) - base
        del logprobs, entropy
    whole_logits = input_ids.numel() * config.vocab_size * 4
    assert peaks[64] < peaks[0] - whole_logits, (peaks, whole_logits)


def test_the_critic_trains_on_the_gpu_and_hands_values_to_the_host(assets):
    """A PPO critic (algo.advantage=gae) on run.device=cuda: its weights on the GPU, host batches
    moved to it, values back on the host; bf16 under train.precision=bf16, float32 head and state."""
    from dataclasses import replace

    from heron.config.critic import CriticConfig
    from heron.config.model import ModelConfig
    from heron.critic.build import CriticSpec, build_critic

    spec = CriticSpec(critic=CriticConfig(lr=1e-2), model=ModelConfig(path=str(assets["model"])),
                      train=TrainConfig(micro_batch_size=4, precision="bf16"), seed=0, device="cuda")
    critic = build_critic(spec)
    assert critic.device.type == "cuda"
    vocab = critic.model.backbone.config.vocab_size
    batch = _batch(vocab, rows=8, length=32)
    batch = replace(batch, returns=torch.rand_like(batch.loss_mask) * batch.loss_mask, old_values=torch.zeros_like(batch.loss_mask))
    metrics = critic.train(batch)
    values = critic.values(batch)
    assert values.device.type == "cpu" and values.shape == batch.loss_mask.shape and bool(values.abs().sum() > 0)
    assert all(math.isfinite(v) for v in metrics.values() if not math.isnan(v))
    assert {p.dtype for p in critic.model.parameters()} == {torch.float32}


# --- the lean decode step on CUDA (heron.rollout.lean_decoder) -----------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_lean_decoding_is_bit_identical_to_the_hf_forward_on_cuda(dtype):
    """The same operations on the same device: the lean step and the HF forward give the same
    tokens and logprobs, as on CPU (tests/unit/test_lean_decoder.py); the wall times are printed."""
    import time

    model = _model(dtype).eval().requires_grad_(False)
    lean, hf = EmbeddedEngine(model, pad_token_id=0), EmbeddedEngine(model, pad_token_id=0, decoder="hf")
    assert lean.decoder == "lean", lean.decoder_reason
    requests = [GenerationRequest(list(range(1, 9 + i % 5)), SamplingParams(max_new_tokens=64, seed=i, stop_token_ids=(7,)))
                for i in range(32)]
    times = {}
    for name, engine in [("hf", hf), ("lean", lean), ("hf", hf), ("lean", lean)]:  # the first of each warms up
        start = time.perf_counter()
        generations = engine.generate(requests)
        torch.cuda.synchronize()
        times[name] = (time.perf_counter() - start, generations)
    (hf_s, expected), (lean_s, actual) = times["hf"], times["lean"]
    print(f"lean decode on cuda, {dtype}: hf {hf_s:.3f} s, lean {lean_s:.3f} s, x{hf_s / lean_s:.2f}")
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.logprobs for g in actual] == [g.logprobs for g in expected]


# --- shared prompts in the training forward on CUDA (heron.trainer.shared_prompts) ------------------
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_shared_prompt_logprobs_match_padded_rows_on_cuda(precision):
    """The attention by parts (heron.trainer.grouped_attention) and position ids through CUDA SDPA: logprobs at the answer positions
    within the CPU tier's bounds (tests/unit/test_shared_prompts.py), the packed forward + backward
    time printed next to the padded one (8 prompts x 4 samples, 192-token prompts, 64-token answers)."""
    import time

    from heron.trainer.logprobs import forward_logprobs
    from heron.trainer.precision import forward_context
    from heron.trainer.model_flops import forward_cost
    from heron.trainer.shared_prompts import plan
    from tests.tolerance import assert_bf16_logprobs_close, assert_logprobs_close, reduction_length

    model = _model()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 8192, (192,), generator=g) for _ in range(8)]
    rows = [torch.cat([p, torch.randint(3, 8192, (64,), generator=g)]) for p in prompts for _ in range(4)]
    input_ids = torch.stack(rows).cuda()  # [32, 256], no padding
    attention_mask = torch.ones_like(input_ids)
    prompt_lengths = torch.full((32,), 192, dtype=torch.long).cuda()
    answer = torch.zeros(32, 255, device="cuda")
    answer[:, 191:] = 1
    layout = plan(input_ids, attention_mask, prompt_lengths, forward_cost(model))
    assert layout is not None and layout.input_ids.shape == (8, 191 + 4 * 65)
    context = forward_context(precision, model)
    times, results = {}, {}
    for name, lay in [("padded", None), ("shared", layout)] * 2:  # the first of each warms up
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        start = time.perf_counter()
        logprobs, _ = forward_logprobs(model, input_ids, attention_mask, forward_context=context, layout=lay)
        (logprobs * answer).sum().backward()
        torch.cuda.synchronize()
        times[name], results[name] = time.perf_counter() - start, (logprobs * answer).detach().cpu()
    print(f"shared prompts on cuda, {precision}: padded {times['padded']:.4f} s, shared {times['shared']:.4f} s, "
          f"x{times['padded'] / times['shared']:.2f}")
    if precision == "fp32":
        n = reduction_length(model.config, tokens=input_ids.numel())
        assert_logprobs_close(results["shared"], results["padded"], n=n, log_vocab=math.log(8192))
    else:
        with torch.no_grad():
            exact, _ = forward_logprobs(model, input_ids, attention_mask)
        keep = answer.cpu() > 0
        assert_bf16_logprobs_close(results["shared"][keep], exact.cpu()[keep], model.config)


# --- the trainer group on CUDA takes host scalars; the finite check takes mixed devices -----------
def test_a_cuda_trainer_group_reduces_host_scalars_and_cuda_tensors():
    """The loss normaliser, metrics and counts are reduced as host scalars (heron.parallel.data_parallel);
    an NCCL-only default group refuses CPU tensors, so on CUDA the group is ``cpu:gloo,cuda:nccl``."""
    import torch.distributed as dist

    from heron.parallel.data_parallel import all_reduce_mean, all_reduce_sum, init_process_group, max_over_ranks

    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    init_process_group(0, 1, store, device="cuda", timeout_s=60)
    try:
        assert all_reduce_sum(2.5) == 2.5 and max_over_ranks(3) == 3 and all_reduce_mean({"a": 1.0}) == {"a": 1.0}
        on_device = torch.ones(4, device="cuda")
        dist.all_reduce(on_device)
        assert on_device.tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()


def test_the_finite_check_takes_cuda_tensors_beside_a_host_step():
    """FSDP2's foreach AdamW keeps ``state["step"]`` on the host beside CUDA moments."""
    from heron.checkpoint.finite import nonfinite_tensors

    moment = torch.zeros(8, device="cuda")
    moment[3] = float("nan")
    state = {"model": {"w": torch.ones(8, device="cuda")},
             "optimizer": {"state": {"w": {"step": torch.tensor(3.0), "exp_avg": moment}}}}
    assert nonfinite_tensors(state) == ["optimizer.state.w.exp_avg"]
