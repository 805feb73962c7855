"""FSDP2's bf16 mixed precision (``train.precision=bf16`` with ``train.parallel=fsdp2``,
heron.parallel.data_parallel.fsdp_mixed_precision), with two real gloo ranks in subprocesses.

What it must be: the float32 shards cast to bfloat16 for the all-gather, forward and backward on
those bf16 weights, the bf16 gradients reduce-scattered in float32 into float32 shards. So a
rank's loss is, bit for bit, the loss of a copy of the model with bfloat16 parameters on its
rows, and each weight's gradient is, bit for bit, the float32 mean over the ranks of that copy's
bf16 gradients (a mean of two floats: ``(a + b) / 2`` in float32 is one rounding whichever way
it is summed, as halving is exact). Master weights, gradients and AdamW state stay float32; the
critic's value head is gathered and run in float32. In a DataParallelTrainer step the forward's
logprobs and entropy are those of the same forward over bfloat16 parameters, bit for bit, and
differ from the float32 gather's under autocast alone (what ranks did before the policy), with
padded rows and with samples sharing their prompt; a LoRA policy whose reference is itself with
its adapters off trains with float32 adapter state."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import gathered_parameters, on_gloo_ranks, rank_trainer
from tests.integration.test_old_logprobs_ranks import _batch
from tests.integration.test_shared_prompts_ranks import _batch as shared_batch

# exact equalities of kernels' results: also checked under other ATEN_CPU_CAPABILITY values and a busy CPU
pytestmark = pytest.mark.portability

WORLD, ROWS, LENGTH = 2, 4, 10


def _loss(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean log-likelihood of the next tokens, in float32 after the logits (as heron's logprobs)."""
    logits = model(input_ids=input_ids[:, :-1]).logits.float()  # [B, L-1, V]
    return logits.log_softmax(-1).gather(-1, input_ids[:, 1:, None]).mean()


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, torch.distributed.tensor.DTensor) else tensor


def _forward_backward(rank: int, model_dir: str) -> dict:
    """The sharded model under the bf16 policy against a bfloat16 copy of the same weights on the
    same rows, its gradients averaged over the ranks by hand."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from heron.parallel.data_parallel import apply_data_parallel

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference = copy.deepcopy(model)
    for param in reference.parameters():  # the parameters only: buffers (RoPE's inv_freq) stay float32, as FSDP2's
        param.data = param.data.to(torch.bfloat16)
    apply_data_parallel(model, "fsdp2", "bf16")
    gathered = []
    hook = model.model.layers[0].mlp.gate_proj.register_forward_pre_hook(lambda m, _: gathered.append(str(m.weight.dtype)))
    input_ids = torch.randint(0, model.config.vocab_size, (ROWS, LENGTH), generator=torch.Generator().manual_seed(rank))
    loss = _loss(model, input_ids)
    loss.backward()
    hook.remove()
    expected = _loss(reference, input_ids)
    expected.backward()
    mismatched = []
    for (name, param), ref in zip(model.named_parameters(), reference.parameters()):
        mean = ref.grad.float()
        dist.all_reduce(mean)
        mean /= WORLD
        if not torch.equal(_full(param.grad), mean):
            mismatched.append(name)
    return {"loss": loss.item(), "expected": expected.item(), "gathered": gathered, "mismatched": mismatched,
            "master_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in model.parameters()})}


def _value_head(rank: int, model_dir: str) -> dict:
    """The critic's value model: the backbone gathered in bf16, the value head in float32."""
    from heron.critic.value_model import load_value_model
    from heron.parallel.data_parallel import apply_data_parallel

    torch.manual_seed(0)
    model = apply_data_parallel(load_value_model(model_dir, "float32"), "fsdp2", "bf16")
    seen = {}

    def record(name):
        def hook(module, _args) -> None:
            seen.setdefault(name, str(module.weight.dtype))
        return hook

    hooks = [model.backbone.layers[0].mlp.gate_proj.register_forward_pre_hook(record("layer")),
             model.value_head.register_forward_pre_hook(record("head"))]
    input_ids = torch.randint(0, 100, (ROWS, LENGTH), generator=torch.Generator().manual_seed(rank))
    values = model(input_ids, torch.ones_like(input_ids))
    values.sum().backward()
    for hook in hooks:
        hook.remove()
    return {**seen, "values": str(values.dtype), "head_grad": str(model.value_head.weight.grad.dtype)}


def _trainer_steps(rank: int, model_dir: str, make_batch=_batch) -> dict:
    """One DataParallelTrainer step on ``make_batch(vocab, rank)`` under train.precision=bf16 three
    ways: the weights gathered in float32 (under autocast alone, as before the policy), in bf16 (the
    policy), and in float32 from a model whose parameters are bfloat16 already (the policy's forward
    without its casts)."""
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    results = {}
    for name, gather, bf16_params in (("autocast", "fp32", False), ("policy", "bf16", True), ("bf16_params", "fp32", True)):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if name == "bf16_params":
            for param in model.parameters():
                param.data = param.data.to(torch.bfloat16)
        model = apply_data_parallel(model, "fsdp2", gather)
        cfg = TrainConfig(lr=1e-3, micro_batch_size=2, precision="bf16")
        trainer = DataParallelTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=4)
        initial = {k: v.clone() for k, v in trainer.host_weights().items()}
        rows = []
        hook = model.register_forward_hook(lambda _m, _a, kwargs, _o: rows.append(kwargs["input_ids"].shape[0]),
                                           with_kwargs=True)
        metrics = trainer.train(make_batch(model.config.vocab_size, rank))
        hook.remove()
        final = trainer.host_weights()
        state = [t for s in trainer.optimizer.state.values() for t in s.values() if t.dim() > 0]
        results[name] = {
            "metrics": metrics, "state_dtypes": sorted({str(t.dtype) for t in state}), "rows": rows,
            "moved": [k for k in initial if not torch.equal(initial[k], final[k])] if rank == 0 else [],
            "weights": len(initial)}
    return results


def _rank_build(rank: int, model_dir: str) -> dict:
    """A trainer rank as a Ray trainer actor builds it (tests.gloo_ranks.rank_trainer): its
    RankSpec's parallelize carries the spec's train.precision."""
    from heron.config.train import TrainConfig

    gathered = {}
    for precision in ("fp32", "bf16"):
        trainer = rank_trainer(model_dir, TrainConfig(precision=precision, micro_batch_size=2))
        layer = trainer.model.model.layers[0].mlp.gate_proj
        hook = layer.register_forward_pre_hook(lambda m, _: gathered.setdefault(precision, str(m.weight.dtype)) and None)
        trainer.train(_batch(trainer.model.config.vocab_size, rank))
        hook.remove()
    return gathered


def _lora_with_reference(rank: int, model_dir: str) -> dict:
    """A LoRA policy whose KL reference is itself with its adapters off (heron.lora.AdaptersDisabled):
    on-policy the reference forward is the first one, where FSDP2 decides what it reduces in
    float32; peft's disable_adapter turns the adapters' requires_grad off while it lasts."""
    from heron.config.algo import AlgoConfig
    from heron.config.model import LoraConfig
    from heron.config.train import TrainConfig

    lora = LoraConfig(enabled=True, rank=4, target_modules=["q_proj", "v_proj"])
    trainer = rank_trainer(model_dir, TrainConfig(precision="bf16", micro_batch_size=2), algo=AlgoConfig(kl_coef=0.1),
                           lora=lora)
    metrics = trainer.train(shared_batch(trainer.model.config.vocab_size, rank))
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if t.dim() > 0]
    return {"kl": metrics["kl"], "trained": sorted({str(p.dtype) for p in trainer.model.parameters() if p.requires_grad}),
            "state_dtypes": sorted({str(t.dtype) for t in state})}


def _critic_values(rank: int, model_dir: str) -> dict:
    """A critic rank built as its actor builds it; what its model holds after ``values`` (a
    forward without a backward) and after ``train``."""
    from heron.cluster.rank_spec import RankSpec, rank_parallelize
    from heron.config.critic import CriticConfig
    from heron.config.model import ModelConfig
    from heron.config.train import TrainConfig
    from heron.critic.build import CriticSpec, build_critic
    from heron.parallel.dp_critic import DataParallelCritic

    spec = CriticSpec(critic=CriticConfig(), model=ModelConfig(path=model_dir),
                      train=TrainConfig(precision="bf16", micro_batch_size=2), seed=0, allow_emulated_bf16=True)
    critic = build_critic(spec, parallelize=rank_parallelize(RankSpec(spec, WORLD, "fsdp2", "cpu", 60.0)),
                          critic_cls=DataParallelCritic)
    batch = _batch(critic.model.backbone.config.vocab_size, rank)
    unsharded = {}
    for operation in ("values", "train"):
        if operation == "values":
            critic.values(batch)
        else:
            batch.returns, batch.old_values = torch.ones_like(batch.loss_mask), torch.zeros_like(batch.loss_mask)
            critic.train(batch)
        unsharded[operation] = gathered_parameters(critic.model)
    return unsharded


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    return {"forward_backward": _forward_backward(rank, model_dir), "value_head": _value_head(rank, model_dir),
            "trainer": _trainer_steps(rank, model_dir), "shared": _trainer_steps(rank, model_dir, shared_batch),
            "rank_build": _rank_build(rank, model_dir),
            "critic": _critic_values(rank, model_dir), "lora": _lora_with_reference(rank, model_dir)}


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> list[dict]:
    return on_gloo_ranks(_scenarios, WORLD, tmp_path_factory.mktemp("fsdp_precision_ranks"), str(toy_model_dir))


def test_the_bf16_policy_is_a_bf16_copy_with_float32_reduction(ranks):
    for rank, result in enumerate(ranks):
        run = result["forward_backward"]
        assert run["gathered"] == ["torch.bfloat16"], rank  # the layer ran on gathered bf16 weights
        assert run["loss"] == run["expected"], rank
        assert run["mismatched"] == [], rank
        assert run["master_dtypes"] == ["torch.float32"] and run["grad_dtypes"] == ["torch.float32"], rank


def test_the_value_head_stays_float32(ranks):
    for rank, result in enumerate(ranks):
        assert result["value_head"] == {"layer": "torch.bfloat16", "head": "torch.float32", "values": "torch.float32",
                                        "head_grad": "torch.float32"}, rank


def test_a_trainer_step_under_the_policy_runs_its_forward_on_bf16_weights_and_keeps_float32_state(ranks):
    # the logprobs (old_logprobs are 0 in this batch, so their distance to them is |logprob|) and the
    # entropy come from the forward: the same bits as the forward over bfloat16 parameters
    forward_metrics = ("engine_logprob_abs_diff_mean", "engine_logprob_abs_diff_max", "entropy", "pg_loss")
    for (rank, result), layout in itertools.product(enumerate(ranks), ("trainer", "shared")):
        runs = result[layout]  # padded rows, and samples sharing their prompt (attention by parts)
        assert runs["policy"]["rows"] == ([2, 2] if layout == "trainer" else [1, 1]), (rank, layout)  # 1 packed row a prompt
        policy, bf16_params, autocast = runs["policy"], runs["bf16_params"], runs["autocast"]
        assert policy["state_dtypes"] == ["torch.float32"] == autocast["state_dtypes"], rank
        assert {k: policy["metrics"][k] for k in forward_metrics} == {k: bf16_params["metrics"][k] for k in forward_metrics}
        if rank == 0:
            assert len(policy["moved"]) == policy["weights"], "every weight takes the step"
        # on-policy, one step: the ratio is 1 and the loss -mean(A) whatever the logprobs; the
        # logprobs themselves differ from autocast's float32-weight forward
        assert policy["metrics"]["pg_loss"] == autocast["metrics"]["pg_loss"], rank
        assert policy["metrics"]["entropy"] != autocast["metrics"]["entropy"], rank


def test_a_rank_built_from_its_spec_gathers_in_its_precision(ranks):
    for rank, result in enumerate(ranks):
        assert result["rank_build"] == {"fp32": "torch.float32", "bf16": "torch.bfloat16"}, rank


def test_a_critic_rank_holds_only_its_shards_between_operations(ranks):
    """A forward without a backward leaves FSDP2's root unit gathered (its backward would reshard
    it): after ``values`` the critic reshards itself, so what it holds between operations -- what
    a sleep offloads -- is its float32 shards, not the root's gathered bf16 copies."""
    for rank, result in enumerate(ranks):
        assert result["critic"] == {"values": [], "train": []}, rank


def test_a_lora_policy_with_its_adapters_off_as_reference_trains(ranks):
    """Before heron.lora.AdaptersDisabled kept the adapters' requires_grad, FSDP2 initialised during
    that first forward, found nothing to train, and the backward failed assigning bf16 gradients to
    the float32 adapter shards. The KL is not 0 although the adapters start at 0: the reference
    forward runs without grad, so with another attention kernel (heron.trainer.attention_kernel),
    and bf16 rounds the two apart."""
    for rank, result in enumerate(ranks):
        lora = result["lora"]
        assert lora["trained"] == ["torch.float32"] and lora["state_dtypes"] == ["torch.float32"], rank
        assert 0.0 <= lora["kl"] < float("inf"), rank
