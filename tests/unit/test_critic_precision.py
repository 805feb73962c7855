"""The critic follows the policy's ``train.precision`` and ``train.gradient_checkpointing``
(heron.critic.build): activation checkpointing recomputes the backbone's layers in the backward
and gives the same update bit for bit (the same ops on the same inputs); bf16 runs the backbone's
matmuls in bfloat16 under autocast while the value head, the values, the gradients and AdamW's
state stay float32, and the values lie within the bf16 round-off of float32's (tests/tolerance.py)."""

from __future__ import annotations

from dataclasses import replace

import torch

from heron.config.critic import CriticConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.critic.build import CriticSpec, build_critic
from tests.tolerance import U_BF16, bf16_autocast_stages
from tests.unit.test_trainer import _rollout


def _critic(model_dir, **train_kw):
    spec = CriticSpec(critic=CriticConfig(lr=1e-2), model=ModelConfig(path=str(model_dir)),
                      train=TrainConfig(micro_batch_size=8, **train_kw), seed=0,
                      allow_emulated_bf16=True)  # bf16 on any CPU (emulated where it has none)
    return build_critic(spec)


def _critic_batch(model_dir):
    """A real rollout's batch with returns and old values (GAE's fields) on its loss tokens."""
    _, _, batch = _rollout(model_dir)
    g = torch.Generator().manual_seed(3)
    returns = torch.rand(batch.loss_mask.shape, generator=g) * batch.loss_mask  # [B, L-1]
    return replace(batch, returns=returns, old_values=torch.zeros_like(returns))


def _outputs(module: torch.nn.Module, record: list):
    return module.register_forward_hook(lambda _m, _i, out: record.append(out.dtype))


def test_checkpointed_critic_recomputes_and_updates_bit_identically(toy_model_dir):
    batch = _critic_batch(toy_model_dir)
    plain, checkpointed = _critic(toy_model_dir), _critic(toy_model_dir, gradient_checkpointing=True)
    counts = {}
    for name, critic in (("plain", plain), ("checkpointed", checkpointed)):
        record: list = []
        # a pre-hook: the backward's recompute stops once it has what it needs (torch's early stop)
        hook = critic.model.backbone.layers[0].mlp.register_forward_pre_hook(lambda *_: record.append(1))
        counts[name] = (critic.train(batch), len(record))
        hook.remove()
    assert counts["checkpointed"][1] == 2 * counts["plain"][1] > 0  # the backward ran the layer again
    assert counts["checkpointed"][0] == counts["plain"][0]
    for (name, a), b in zip(plain.model.state_dict().items(), checkpointed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_bf16_critic_keeps_float32_values_weights_and_state(toy_model_dir):
    batch = _critic_batch(toy_model_dir)
    fp32, bf16 = _critic(toy_model_dir), _critic(toy_model_dir, precision="bf16")
    for critic in (fp32, bf16):
        with torch.no_grad():  # a non-zero head, the same in both, so the values carry the backbone's error
            critic.model.value_head.weight.copy_(torch.linspace(-1, 1, critic.model.value_head.weight.numel()).view(1, -1))
    record: list = []
    head: list = []
    hooks = [_outputs(bf16.model.backbone.layers[0].mlp.down_proj, record), _outputs(bf16.model.value_head, head)]
    values = bf16.values(batch)  # [B, L-1]
    for hook in hooks:
        hook.remove()
    assert record and set(record) == {torch.bfloat16}
    assert head and set(head) == {torch.float32} and values.dtype == torch.float32

    # |V_bf16 - V_fp32| <= |w| |dh| and |dh| <= 2 (2 u_bf16 S) |h| per position (tests/tolerance.py,
    # assert_bf16_logprobs_close: the norm-wise relative errors of S bf16 stages add to first order)
    with torch.no_grad():
        hidden = fp32.model.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    bound = 2 * (2 * U_BF16 * bf16_autocast_stages(fp32.model.backbone.config))
    bound = bound * fp32.model.value_head.weight.norm() * hidden[:, :-1].norm(dim=-1) * batch.loss_mask  # [B, L-1]
    difference = (values - fp32.values(batch)).abs()
    assert bool((difference <= bound).all()) and float(difference.max()) > 0, float((difference - bound).max())

    metrics = bf16.train(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert {p.dtype for p in bf16.model.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in bf16.model.parameters() if p.grad is not None} <= {torch.float32}
    state = [t for s in bf16.optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.numel() > 1]
    assert state and {t.dtype for t in state} == {torch.float32}
