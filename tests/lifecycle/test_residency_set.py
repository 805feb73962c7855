"""``ResidencySet``: a stand-in's actors enter and leave their resident scopes together
(concurrently); a failed entry leaves the others as they were. Real state machines and the
host-offload backend on CPU tensors, one per 'bundle' (no Ray needed for this logic)."""

from __future__ import annotations

import pytest
import torch

from heron.cluster.remote_residency import ResidencySet
from heron.residency.errors import ResidencyError
from heron.residency.host_offload import HostOffload
from heron.residency.state import Holdings, Residency, State


class DeviceGone(HostOffload):
    def restore(self) -> None:
        raise RuntimeError("device gone")


def _member(name: str, backend) -> tuple[Residency, torch.nn.Linear, list[torch.Tensor]]:
    """A residency resting asleep, its layer, and a copy of the layer's parameters taken awake."""
    layer = torch.nn.Linear(3, 3)
    awake_copy = [p.detach().clone() for p in layer.parameters()]
    residency = Residency(name, Holdings(lambda: {"params": list(layer.parameters())}, [("model", layer)]), backend,
                          device=f"bundle-{name}")
    residency.sleep()
    return residency, layer, awake_copy


def test_members_are_awake_inside_and_asleep_after_also_on_error():
    (a, layer_a, copy_a), (b, layer_b, copy_b) = _member("a", HostOffload()), _member("b", HostOffload())
    group = ResidencySet([a, b])
    assert group.state is State.ASLEEP
    with group.resident("train"):
        assert (a.state, b.state) == (State.AWAKE, State.AWAKE)
        assert a.current_operation() == b.current_operation() == "train"
        layer_a(torch.ones(1, 3)), layer_b(torch.ones(1, 3))  # memory is back
    assert (a.state, b.state) == (State.ASLEEP, State.ASLEEP)
    with pytest.raises(ValueError, match="boom"):
        with group.resident("train"):
            raise ValueError("boom")
    assert (a.state, b.state, a.current_operation(), b.current_operation()) == (State.ASLEEP, State.ASLEEP, None, None)
    with group.resident("check"):
        after = [p.detach().clone() for p in [*layer_a.parameters(), *layer_b.parameters()]]
    assert all(torch.equal(x, y) for x, y in zip(copy_a + copy_b, after))  # bit-exact through the round trips


def test_a_failed_entry_leaves_the_others_as_they_were_and_raises_it():
    (good, *_), (broken, *_) = _member("good", HostOffload()), _member("broken", DeviceGone())
    group = ResidencySet([good, broken])
    with pytest.raises(ResidencyError, match="broken: waking failed .*device gone"):
        with group.resident("generate"):
            pytest.fail("the body must not run when a member could not wake")
    assert good.state is State.ASLEEP and good.current_operation() is None
    assert broken.state is State.FAILED
    assert group.state is State.FAILED
