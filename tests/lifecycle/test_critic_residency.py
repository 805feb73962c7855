"""The critic's residency on the toy architecture (at its smallest size, ``micro_template``): it
rests asleep when offloaded, a sleep/wake round trip restores its parameters and AdamW state bit-identically into the same tensors, its
operations wake it and put it back, the guard catches an undeclared use, and colocated it takes
turns with the other components on its device. An offloaded critic computes exactly what a
never-offloaded shadow computes."""

from __future__ import annotations

import pytest
import torch

from heron.config.critic import CriticConfig
from heron.critic.critic import Critic
from heron.critic.value_model import ValueModel
from heron.residency import ReleasedMemoryError, State
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import attach
from residency_pair import train_batch


def _critic(micro_template, coordinator: Coordinator, name: str, offload: bool) -> Critic:
    import copy

    backbone = copy.deepcopy(micro_template.model)  # the causal LM's base model: what AutoModel loads
    critic = Critic(ValueModel(backbone, micro_template.config.hidden_size), CriticConfig(lr=1e-2),
                    steps_per_rollout=2, micro_batch_size=2)
    attach(critic, name, critic.holdings(), offload=offload, coordinator=coordinator, wait_timeout_s=60)
    return critic


def _gae_batch(vocab_size: int):
    batch = train_batch(vocab_size)
    gen = torch.Generator().manual_seed(1)
    batch.returns = torch.randn(batch.loss_mask.shape, generator=gen) * batch.loss_mask  # [B, L-1]
    batch.old_values = torch.zeros_like(batch.loss_mask)
    batch.advantages = batch.returns.clone()
    return batch


def _state(critic: Critic) -> dict[str, torch.Tensor]:
    tensors = {f"param/{n}": p.detach().clone() for n, p in critic.model.named_parameters()}
    for i, state in enumerate(critic.optimizer.state.values()):
        tensors.update({f"adam/{i}/{k}": v.clone() for k, v in state.items() if torch.is_tensor(v)})
    return tensors


def test_round_trip_is_bit_identical_into_the_same_tensors(micro_template):
    critic = _critic(micro_template, Coordinator(colocate=False), "critic", offload=True)
    assert critic.residency_state is State.ASLEEP and sum(critic.memory_report().values()) == 0
    critic.train(_gae_batch(micro_template.config.vocab_size))  # creates the AdamW moments
    assert critic.residency_state is State.ASLEEP  # the operation put it back
    critic.wake()
    before, objects = _state(critic), [id(p) for p in critic.model.parameters()]
    critic.sleep()
    assert sum(critic.memory_report().values()) == 0
    assert critic.residency.released_bytes["optimizer"] > 0 and critic.residency.released_bytes["params"] > 0
    with pytest.raises(ReleasedMemoryError, match="critic is asleep"):
        critic.model(torch.tensor([[5, 6, 7]]), torch.ones(1, 3))  # an undeclared use while asleep
    critic.wake()
    after = _state(critic)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [id(p) for p in critic.model.parameters()] == objects


def test_offloaded_critic_computes_what_a_resident_one_does(micro_template):
    batch = _gae_batch(micro_template.config.vocab_size)
    offloaded = _critic(micro_template, Coordinator(colocate=False), "offloaded", offload=True)
    shadow = _critic(micro_template, Coordinator(colocate=False), "shadow", offload=False)
    for _ in range(2):
        assert offloaded.train(batch) == shadow.train(batch)
        assert torch.equal(offloaded.values(batch), shadow.values(batch))
    offloaded.wake()
    assert all(torch.equal(a, b) for a, b in zip(offloaded.model.parameters(), shadow.model.parameters()))


def test_colocated_critic_takes_turns_on_its_device(micro_template):
    coordinator = Coordinator(colocate=True)
    critic = _critic(micro_template, coordinator, "critic", offload=True)
    other = _critic(micro_template, coordinator, "other", offload=True)  # stands for the trainer on the same device
    other.wake()
    critic.values(_gae_batch(micro_template.config.vocab_size))  # wakes the critic: the other sleeps first
    assert other.residency_state is State.ASLEEP and critic.residency_state is State.ASLEEP
    assert coordinator.awake_on(critic.residency.device_key) == []
