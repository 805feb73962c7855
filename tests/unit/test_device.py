"""The device seam (heron.device): how a device request resolves, the one-line errors for a
device this machine or Ray cluster does not have, and that CPU placement is the identity for
tensors in memory of their own (so ``run.device=cpu`` is the CUDA code path with another
``torch.device``, computing what it did before). The CUDA side of the same calls is the GPU tier
(tests/gpu)."""

from __future__ import annotations

import io
import os

import pytest
import torch
import torch.serialization

from heron import device as seam
from heron.checkpoint.safe_load import load_plain
from heron.cluster.placement import PlacementError, PlacementPlan, check_placeable
from heron.config.base import ConfigError
from heron.config.root import load_config
from heron.trainer.batch import TrainBatch

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the errors of a machine without CUDA")


def test_cpu_and_auto_resolve_to_the_host_without_cuda():
    assert seam.resolve("cpu") == seam.HOST
    expected = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else seam.HOST
    assert seam.resolve("auto") == expected


@no_cuda
def test_cuda_without_cuda_is_one_line_naming_the_key():
    with pytest.raises(seam.DeviceError) as e:
        seam.resolve("cuda")
    message = str(e.value)
    assert "\n" not in message and message.startswith("run.device=cuda") and "run.device=cpu" in message


def test_an_unknown_kind_is_refused():
    with pytest.raises(seam.DeviceError, match="unknown device 'tpu'"):
        seam.resolve("tpu")


def test_the_seam_chooses_collectives_bundles_and_pinning():
    assert [seam.collective_backend(k) for k in ("cpu", "cuda")] == ["gloo", "cpu:gloo,cuda:nccl"]
    assert [seam.gpus_per_bundle(k) for k in ("cpu", "cuda")] == [0, 1]
    assert PlacementPlan.build(2, 1, True, 1.0, "cuda").bundles() == [{"CPU": 1.0, "GPU": 1.0}] * 2
    assert not seam.pins_host_memory("cpu") and seam.pins_host_memory(torch.device("cuda", 0))
    assert [seam.memory_backend_kind("cpu", offload) for offload in (False, True)] == ["keep", "host"]


def test_gloo_groups_connect_their_pairs_on_first_use_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv(seam.GLOO_LAZY_INIT, raising=False)
    seam.prepare_process_groups()
    assert seam.GLOO_LAZY_INIT == "TORCH_GLOO_LAZY_INIT" and os.environ[seam.GLOO_LAZY_INIT] == "1"
    monkeypatch.setenv(seam.GLOO_LAZY_INIT, "0")
    seam.prepare_process_groups()
    assert os.environ[seam.GLOO_LAZY_INIT] == "0"


def test_placing_on_the_host_keeps_the_same_tensors():
    """CPU placement is the identity: same parameter storages, same batch object (bit-identical runs)."""
    module = torch.nn.Linear(3, 2)
    storage = module.weight.untyped_storage().data_ptr()
    assert seam.place(module, seam.HOST) is module and module.weight.untyped_storage().data_ptr() == storage
    tensor = torch.ones(2)
    assert seam.to_device(tensor, seam.HOST) is tensor and seam.to_host(tensor) is tensor
    batch = _batch()
    assert batch.to(seam.HOST) is batch


def test_placed_weights_live_in_memory_of_their_own_not_in_the_file(toy_model_dir, tmp_path):
    """``from_pretrained`` maps the safetensors file on the CPU; ``place`` copies those weights into
    ordinary, 64-byte-aligned memory (the same Parameter objects, the tie kept, the same values), so
    rewriting the file in place under a run changes nothing (mapped, the next read died of SIGBUS)
    and MKL sees the alignment every other tensor has (see heron.device.own_memory)."""
    import shutil

    from heron.models import load_model

    folder = shutil.copytree(toy_model_dir, tmp_path / "model")
    model = load_model(str(folder), "float32")
    assert not all(p.untyped_storage().resizable() for p in model.parameters())  # mapped: what place fixes
    expected = {name: p.detach().clone() for name, p in model.named_parameters()}
    params = list(model.parameters())
    assert seam.place(model, seam.HOST) is model and list(model.parameters()) == params
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the toy model ties them
    for name, param in model.named_parameters():
        assert param.untyped_storage().resizable() and param.data_ptr() % 64 == 0, name
    for weights in folder.glob("*.safetensors"):
        weights.write_bytes(b"")  # truncated in place, as save_pretrained into the folder would first do
    for name, param in model.named_parameters():
        assert torch.equal(param, expected[name]), name


def test_a_batch_moves_every_tensor_field():
    """The copying branch of TrainBatch.to (taken on CUDA), on the meta device: every tensor field
    moves, ids and versions stay, the host batch is unchanged."""
    batch = _batch()
    moved = batch.to(torch.device("meta"))
    tensors = [f for f in vars(moved) if torch.is_tensor(getattr(moved, f))]
    assert {getattr(moved, f).device.type for f in tensors} == {"meta"}
    assert moved.sample_ids == batch.sample_ids and moved.rollout_id == batch.rollout_id
    assert batch.input_ids.device == seam.HOST


def _batch() -> TrainBatch:
    return TrainBatch(
        rollout_id=3, policy_version=2, sample_ids=["a", "b"], input_ids=torch.ones(2, 4, dtype=torch.long),
        attention_mask=torch.ones(2, 4, dtype=torch.long), loss_mask=torch.ones(2, 3), advantages=torch.zeros(2),
        old_logprobs=torch.zeros(2, 3), mismatch_weights=torch.ones(2, 3),
    )


def test_run_device_and_cluster_device_must_agree_on_ray():
    base = ["model.path=m", "data.path=d"]
    assert load_config(None, [*base, "run.device=cuda"]).run.device == "cuda"  # checked by the pre-flight, not the config
    assert load_config(None, [*base, "cluster.backend=ray", "cluster.device=cuda"]).cluster.device == "cuda"
    with pytest.raises(ConfigError, match="run.device=cuda places the local backend"):
        load_config(None, [*base, "cluster.backend=ray", "run.device=cuda"])


def test_a_ray_cluster_without_gpus_is_one_line():
    plan = PlacementPlan.build(1, 1, True, 1.0, "cuda")
    with pytest.raises(PlacementError) as e:
        check_placeable(plan, {"CPU": 4.0}, "a local Ray of cluster.num_cpus=4")
    message = str(e.value)
    assert "\n" not in message and message.startswith("cluster.device=cuda but a local Ray") and "has no GPUs" in message
    check_placeable(plan, {"CPU": 4.0, "GPU": 1.0}, "a cluster")  # one bundle, one GPU: fits


def _saved_on_cuda(obj) -> io.BytesIO:
    """``obj`` serialised as a CUDA run writes it (storages tagged ``cuda:0``), made on any machine."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
    finally:
        torch.serialization.location_tag = original
    buffer.seek(0)
    return buffer


@no_cuda
def test_a_cuda_saved_item_loads_onto_the_configured_device():
    """Resume across devices: a checkpoint item holding a tensor a CUDA run saved is mapped to the
    trainer's device (here the host) through the seam; torch.load alone refuses it on this machine."""
    with pytest.raises(RuntimeError, match="CUDA device"):
        torch.load(_saved_on_cuda({"t": torch.arange(3.0)}), weights_only=True)
    loaded = load_plain(_saved_on_cuda({"lr": 0.1, "t": torch.arange(3.0)}), seam.HOST, "optimizer.param_groups")
    assert loaded["lr"] == 0.1 and loaded["t"].device == seam.HOST and loaded["t"].tolist() == [0.0, 1.0, 2.0]
