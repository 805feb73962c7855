"""Pure logic of the cluster layer: batch sharding, placement plans, weight wire format,
version checks and the cluster config rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from heron.cluster.placement import PlacementPlan
from heron.config.base import ConfigError
from heron.config.root import load_config
from heron.parallel.shard_batch import shard_for_ranks
from heron.trainer.batch import TrainBatch
from heron.weights.version import WeightVersionError, check_served_versions
from heron.weights.handle import SafetensorsFile, WeightHandle
from heron.weights.wire import from_wire, to_wire


def _batch(num_rows: int) -> TrainBatch:
    rows = torch.arange(num_rows)
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"s{i}" for i in range(num_rows)],
        input_ids=rows[:, None].repeat(1, 3), attention_mask=torch.ones(num_rows, 3, dtype=torch.long),
        loss_mask=torch.ones(num_rows, 2), advantages=rows.float(), old_logprobs=torch.zeros(num_rows, 2),
    )


def test_each_rank_gets_its_share_of_every_mini_batch():
    # 8 rows, 2 steps -> mini-batches [0..3], [4..7]; 2 ranks -> shares of 2
    shards = shard_for_ranks(_batch(8), steps=2, world_size=2)
    assert [s.sample_ids for s in shards] == [["s0", "s1", "s4", "s5"], ["s2", "s3", "s6", "s7"]]
    assert shards[1].advantages.tolist() == [2.0, 3.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="equal rank shares"):
        shard_for_ranks(_batch(6), steps=2, world_size=2)


def test_placement_colocated_shares_bundles_disaggregated_does_not():
    colocated = PlacementPlan.build(world_size=2, num_engines=1, colocate=True, cpus_per_bundle=1.0, device="cpu")
    assert (colocated.num_bundles, colocated.trainer_bundles, colocated.engine_bundles) == (2, [0, 1], [0])
    assert colocated.share(0) == 0.5 and colocated.share(1) == 1.0
    apart = PlacementPlan.build(world_size=2, num_engines=2, colocate=False, cpus_per_bundle=0.5, device="cuda")
    assert (apart.num_bundles, apart.engine_bundles) == (4, [2, 3])
    assert apart.bundles()[0] == {"CPU": 0.5, "GPU": 1.0} and apart.share(3) == 1.0


def test_wire_round_trip_keeps_values_and_dtypes(tmp_path):
    state = {"a": torch.randn(3, 2), "b": torch.randn(4).to(torch.bfloat16)}
    wire = to_wire(state)
    assert isinstance(wire["a"], np.ndarray)
    back = from_wire(wire)
    assert back["b"].dtype == torch.bfloat16 and torch.equal(back["b"], state["b"]) and torch.equal(back["a"], state["a"])
    tied = {"x": state["a"], "y": state["a"]}  # tied weights are written once
    first = SafetensorsFile.write_version(tied, tmp_path, version=1)
    assert list(first.tensors(1)) == ["x"]
    second = SafetensorsFile.write_version(state, tmp_path, version=2)
    assert not (tmp_path / "weights-v000001.safetensors").exists()  # older versions are removed
    assert torch.equal(WeightHandle(2, second).tensors()["a"], state["a"])


def test_only_durable_weight_files_are_fsynced(tmp_path, monkeypatch):
    """A server engine's own copy of a push is written without fsync (durable=False); the disk
    transport's file, which other nodes read, with it. Both atomically (no tmp file left)."""
    import os

    from heron.weights import handle

    synced = []
    fsync = os.fsync
    monkeypatch.setattr(handle.os, "fsync", lambda fd: (synced.append(fd), fsync(fd)))
    state = {"a": torch.randn(3, 2)}
    transient = SafetensorsFile.write_version(state, tmp_path / "engine", 1, durable=False)
    assert synced == [] and torch.equal(transient.tensors(1)["a"], state["a"])
    SafetensorsFile.write_version(state, tmp_path / "disk", 1)
    assert len(synced) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["disk", "engine", "weights-v000001.safetensors",
                                                          "weights-v000001.safetensors"]


def test_version_mismatch_names_the_engine():
    check_served_versions({"engine-0": 3, "engine-1": 3}, 3)
    with pytest.raises(WeightVersionError, match="engine-1 serves policy version 2 but the trainer pushed version 3"):
        check_served_versions({"engine-0": 3, "engine-1": 2}, 3)


def test_cluster_config_rules():
    base = ["model.path=m", "data.path=d", "rollout.batch_size=4", "rollout.samples_per_prompt=2", "checkpoint.enabled=false"]
    with pytest.raises(ConfigError, match="needs cluster.backend=ray"):
        load_config(None, [*base, "train.world_size=2"])
    with pytest.raises(ConfigError, match="must divide the mini-batch of 8"):
        load_config(None, [*base, "train.world_size=3", "cluster.backend=ray"])
    with pytest.raises(ConfigError, match="on Ray cluster.device=cpu does: set run.device=auto or cluster.device=cuda"):
        load_config(None, [*base, "cluster.backend=ray", "run.device=cuda"])
    assert load_config(None, [*base, "cluster.backend=ray", "cluster.device=cuda"]).cluster.device == "cuda"
    with pytest.raises(ConfigError, match="loop.mode=async needs disaggregated engines"):
        load_config(None, [*base, "loop.mode=async", "cluster.backend=ray", "colocate=true"])
    with pytest.raises(ConfigError, match="cluster.num_engines=2 must be <= train.world_size=1"):
        load_config(None, [*base, "cluster.backend=ray", "colocate=true", "cluster.num_engines=2"])
    with pytest.raises(ConfigError, match="broadcast with colocate=true on cluster.device=cuda .* use cluster.weight_transport=object_store"):
        load_config(None, [*base, "cluster.backend=ray", "colocate=true", "cluster.device=cuda", "cluster.weight_transport=broadcast"])
    assert load_config(None, [*base, "cluster.backend=ray", "colocate=true", "cluster.weight_transport=broadcast"]).colocate
    with pytest.raises(ConfigError, match="call_timeout_s must be > 0"):
        load_config(None, [*base, "cluster.call_timeout_s=0"])
    assert load_config(None, [*base, "cluster.backend=ray", "checkpoint.hf_export=true"]).checkpoint.hf_export
    cfg = load_config(None, [*base, "train.world_size=2", "cluster.backend=ray", "train.parallel=ddp"])
    assert (cfg.train.world_size, cfg.train.parallel, cfg.colocate) == (2, "ddp", False)
