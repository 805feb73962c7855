"""Host-offload backend and accounting on plain tensors: bit-exact restore into the same
objects, shared storages counted and moved once, optimizer still works, errors."""

from __future__ import annotations

import pytest
import torch

from heron.residency.accounting import storage_bytes
from heron.residency.backend import KeepResident, select_backend
from heron.residency.errors import ResidencyError
from heron.residency.host_offload import HostOffload


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(5, 8)).square().mean().backward()
    optimizer.step()
    return model, optimizer


def _inventory(model, optimizer):
    return {
        "params": list(model.parameters()),
        "grads": [p.grad for p in model.parameters() if p.grad is not None],
        "optimizer": [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)],
    }


def test_release_frees_every_byte_and_restore_is_bit_exact_in_the_same_objects():
    model, optimizer = _model_and_optimizer()
    inventory = _inventory(model, optimizer)
    before = {id(t): (t, t.clone(), t.untyped_storage()._cdata) for ts in inventory.values() for t in ts}
    held = storage_bytes(inventory)
    assert held["params"] == 4 * (8 * 16 + 16 + 16 * 4 + 4) and held["grads"] == held["params"]
    backend = HostOffload()
    backend.release(inventory)
    assert storage_bytes(inventory) == {"params": 0, "grads": 0, "optimizer": 0}
    assert backend.host_bytes() == sum(held.values())
    backend.restore()
    assert backend.host_bytes() == 0
    for tensor, copy, storage_id in before.values():
        assert tensor.untyped_storage()._cdata == storage_id  # the same storage object
        assert tensor.reshape(-1).view(torch.uint8).equal(copy.reshape(-1).view(torch.uint8))  # bitwise
    assert storage_bytes(inventory) == held


def test_optimizer_state_and_hooks_keep_working_after_wake():
    model, optimizer = _model_and_optimizer()
    twin, twin_optimizer = _model_and_optimizer()
    calls = []
    model[0].register_forward_hook(lambda *a: calls.append(1))
    backend = HostOffload()
    backend.release(_inventory(model, optimizer))
    backend.restore()
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    for m, opt in ((model, optimizer), (twin, twin_optimizer)):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
    assert calls == [1]
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_views_and_tied_tensors_share_one_storage_counted_once():
    base = torch.randn(10)
    view = base[2:5]
    inventory = {"params": [base], "buffers": [view]}
    assert storage_bytes(inventory) == {"params": 40, "buffers": 0}
    backend = HostOffload()
    expected = view.clone()
    backend.release(inventory)
    assert backend.host_bytes() == 40
    backend.restore()
    assert torch.equal(view, expected) and view.data_ptr() == base.data_ptr() + 8


def test_non_resizable_storage_is_refused_before_anything_is_released():
    import numpy as np

    ordinary = torch.randn(4)
    from_numpy = torch.from_numpy(np.ones(4, dtype=np.float32))
    with pytest.raises(ResidencyError, match="non-resizable storage"):
        HostOffload().release({"params": [ordinary, from_numpy]})
    assert ordinary.untyped_storage().nbytes() == 16


def test_backend_selection_on_cpu_never_imports_torch_memory_saver():
    import sys

    assert isinstance(select_backend(torch.device("cpu"), offload=False, tag="t"), KeepResident)
    assert isinstance(select_backend(torch.device("cpu"), offload=True, tag="t"), HostOffload)
    assert "torch_memory_saver" not in sys.modules
