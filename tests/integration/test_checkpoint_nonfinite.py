"""A checkpoint with non-finite tensors is never committed (issue 9, item 2.7): ``train.lr=inf``
used to commit a checkpoint whose 24 tensors were all NaN. The save stops with one line naming
the tensor, writes nothing, and the last good checkpoint stays ``latest``. An async save checks
its staged copy in the background, before its first shard, so the loop is not held up by the
check and the error comes back from the next wait, like a failed write."""

import pytest
import torch

from heron.checkpoint.finite import NonFiniteStateError
from heron.checkpoint.layout import read_latest
from heron.checkpoint.shards import ModuleShards
from heron.checkpoint.writer import CheckpointWriter
from tests.checkpoint_helpers import model_and_optimizer


def _plant_in_weight(model, optimizer):
    with torch.no_grad():
        model[1].weight[0, 2] = float("nan")
    return "1.weight"


def _plant_in_optimizer(model, optimizer):
    optimizer.state[model[0].bias]["exp_avg_sq"][3] = float("inf")
    return "optimizer.state.0.bias.exp_avg_sq"


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("plant", [_plant_in_weight, _plant_in_optimizer])
def test_a_nonfinite_tensor_stops_the_save_and_keeps_the_last_good_checkpoint(tmp_path, async_save, plant):
    model, optimizer = model_and_optimizer()
    writer = CheckpointWriter(tmp_path, async_save=async_save, keep_last=0)
    shards = ModuleShards(model, optimizer)
    writer.save(0, shards, {"rollout_id": 0})
    writer.wait()
    name = plant(model, optimizer)
    with pytest.raises(NonFiniteStateError) as e:
        writer.save(1, shards, {"rollout_id": 1})
        assert async_save  # sync raises in save; async checks the staged copy behind the loop
        writer.wait()  # ... and raises from the next wait, like a failed write
    message = str(e.value)
    assert f"'{name}'" in message and "rollout-000001 not saved" in message and "\n" not in message
    assert not shards.staging  # a failed check does not leave the trainer waiting to sleep
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "rollout-000000"]
    assert read_latest(tmp_path) == "rollout-000000"


def test_every_bad_tensor_is_counted_and_the_first_is_named(tmp_path):
    model, optimizer = model_and_optimizer()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    writer = CheckpointWriter(tmp_path, async_save=False)
    with pytest.raises(NonFiniteStateError, match=r"tensor '0.weight' holds inf or nan \(and 3 more\)"):
        writer.save(0, ModuleShards(model, optimizer), {"rollout_id": 0})  # 2 weights + 2 biases
    writer.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)  # the old code hung here forever: the failed save left a Future with no result
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_the_same_trainer_saves_again_after_a_refused_save(tmp_path, async_save):
    """A refused save leaves nothing pending: once the state is finite again, the next save of
    the same shards writes and commits."""
    model, optimizer = model_and_optimizer()
    shards = ModuleShards(model, optimizer)
    writer = CheckpointWriter(tmp_path, async_save=async_save, keep_last=0)
    name = _plant_in_weight(model, optimizer)
    with pytest.raises(NonFiniteStateError, match=f"'{name}'"):
        writer.save(0, shards, {"rollout_id": 0})
        writer.wait()
    with torch.no_grad():
        model[1].weight[0, 2] = 0.0
    writer.save(1, shards, {"rollout_id": 1})
    writer.wait()
    writer.close()
    assert read_latest(tmp_path) == "rollout-000001"
