"""Every public operation of a resident component declares what it needs (design §3)."""

from __future__ import annotations

import pytest

from heron.cluster.engine_group import RemoteEngine
from heron.cluster.critic_group import CriticGroup
from heron.critic.critic import Critic
from heron.cluster.trainer_group import TrainerGroup
from heron.parallel.dp_trainer import DataParallelTrainer
from heron.residency import Resident, host_only, needs_device, undeclared_operations
from heron.residency.declare import HOST_ONLY, LIFECYCLE, NEEDS_DEVICE, declared_need, public_operations
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.server.engine import ServerEngine
from heron.trainer.policy_trainer import PolicyTrainer


@pytest.mark.parametrize(
    "component", [PolicyTrainer, EmbeddedEngine, DataParallelTrainer, RemoteEngine, TrainerGroup, ServerEngine,
                  Critic, CriticGroup]
)
def test_every_public_operation_declares_its_needs(component):
    assert undeclared_operations(component) == []


def test_the_check_catches_an_undeclared_method_and_property():
    class Careless(Resident):
        @needs_device
        def train(self): ...

        def save(self): ...

        @property
        def size(self): ...

        @classmethod
        def build(cls): ...

    assert undeclared_operations(Careless) == ["save", "size"]


def test_declarations_of_the_operations_that_matter():
    operations = {"trainer": public_operations(PolicyTrainer), "engine": public_operations(EmbeddedEngine)}
    expected = {
        ("trainer", "train"): NEEDS_DEVICE, ("trainer", "compute_logprobs"): NEEDS_DEVICE,
        ("trainer", "save_state"): NEEDS_DEVICE, ("trainer", "load_state"): NEEDS_DEVICE, ("trainer", "wait_saved"): HOST_ONLY, ("trainer", "export_hf"): NEEDS_DEVICE,
        ("trainer", "weights"): HOST_ONLY, ("trainer", "sleep"): LIFECYCLE, ("trainer", "wake"): LIFECYCLE,
        ("engine", "generate"): NEEDS_DEVICE, ("engine", "load_weights"): NEEDS_DEVICE,
        ("engine", "policy_version"): HOST_ONLY,
    }
    for (component, name), need in expected.items():
        assert declared_need(operations[component][name]) == need, (component, name)
    stand_ins = {"trainer": public_operations(TrainerGroup), "engine": public_operations(RemoteEngine)}
    server = public_operations(ServerEngine)  # the vLLM engine declares the engine verbs like the embedded one
    for (component, name), need in expected.items():
        if component == "engine":
            assert declared_need(server[name]) == need, ("server engine", name)
    for (component, name), need in expected.items():  # the Ray stand-ins declare the same verbs the same way
        if name in stand_ins[component]:
            assert declared_need(stand_ins[component][name]) == need, ("stand-in", component, name)
    assert host_only  # imported for the public API check above


def test_the_critic_declares_its_operations_and_its_stand_in_the_same():
    """The critic (algo.advantage=gae) wakes for its values, updates and checkpoints; waiting for
    an async save and its metadata never wake it; the Ray stand-in declares the same verbs."""
    expected = {
        "values": NEEDS_DEVICE, "train": NEEDS_DEVICE, "save_state": NEEDS_DEVICE, "load_state": NEEDS_DEVICE,
        "wait_saved": HOST_ONLY, "holdings": HOST_ONLY, "sleep": LIFECYCLE, "wake": LIFECYCLE,
    }
    local, remote = public_operations(Critic), public_operations(CriticGroup)
    for name, need in expected.items():
        assert declared_need(local[name]) == need, ("critic", name)
        assert declared_need(remote[name]) == need, ("remote critic", name)
    assert declared_need(local["device"]) == HOST_ONLY
