"""Process groups owned by a component are destroyed on sleep and recreated on wake, with
real gloo groups: one rank in-process (through attach_residency), two ranks in subprocesses."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from heron.device import GLOO_LAZY_INIT
from heron.residency import ResidencyError, State
from heron.residency.backend import select_backend
from heron.residency.process_group import ManagedProcessGroup
from heron.residency.state import Holdings, Residency
from heron.residency.wiring import TRAINER_GROUP
from tests.gloo_ranks import on_gloo_ranks


@pytest.fixture
def gloo_world(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_trainer_group_released_on_sleep_and_recreated_on_wake(gloo_world, make_pair_in_world):
    pair = make_pair_in_world()
    residency = pair.trainer.residency
    managed = residency.holdings.process_groups[TRAINER_GROUP]
    assert pair.trainer.residency_state is State.ASLEEP and managed.released
    with pytest.raises(ResidencyError, match="trainer is asleep: its process group 'trainer' is released"):
        residency.process_group(TRAINER_GROUP)
    pair.trainer.wake()
    group = residency.process_group(TRAINER_GROUP)
    value = torch.ones(3)
    dist.all_reduce(value, group=group)
    assert value.tolist() == [1.0, 1.0, 1.0]
    pair.engine.wake()  # colocated: the trainer sleeps and gives its group back
    assert managed.released and group not in dist.distributed_c10d._world.pg_names


@pytest.fixture
def make_pair_in_world(toy_model_dir):
    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.residency.wiring import ResidencySettings, attach_residency
    from heron.rollout.embedded import EmbeddedEngine
    from heron.trainer.objectives import PolicyObjective
    from heron.trainer.policy_trainer import PolicyTrainer

    def make():
        engine = EmbeddedEngine.from_pretrained(toy_model_dir)
        trainer = PolicyTrainer(EmbeddedEngine.from_pretrained(toy_model_dir).model.train().requires_grad_(True),
                                TrainConfig(), PolicyObjective(AlgoConfig()), total_steps=10)
        attach_residency(trainer, engine, ResidencySettings(colocate=True, offload_train=True, offload_rollout=True,
                                                            process_group_backend="gloo"))
        return SimpleNamespace(trainer=trainer, engine=engine)

    return make


def _lockstep(rank: int, tmp) -> dict:
    """Three sleep / wake cycles of a trainer whose managed group ``dp`` is released on sleep and
    recreated on wake, an all-reduce over it in each; on every rank of a 2-rank gloo world."""
    layer = torch.nn.Linear(4, 4)
    group = ManagedProcessGroup("trainer", "dp", backend="gloo")
    residency = Residency(
        "trainer", Holdings(lambda: {"params": list(layer.parameters())}, [("layer", layer)],
                            process_groups={"dp": group}),
        select_backend(torch.device("cpu"), offload=True, tag="trainer"), device="cpu",
    )
    sums = []
    for cycle in range(3):
        residency.sleep()
        assert group.released and layer.weight.untyped_storage().nbytes() == 0
        with residency.resident("all_reduce_step"):
            value = torch.full((2,), float(rank + cycle))
            dist.all_reduce(value, group=residency.process_group("dp"))
            sums.append(value.tolist())
    return {"sums": sums, "lazy": os.environ.get(GLOO_LAZY_INIT)}


def test_two_ranks_release_and_recreate_their_group_in_lockstep(tmp_path):
    """A rank that dies (an exception, or gloo failing to connect) fails the test at once, with
    its traceback (tests/gloo_ranks.py), instead of leaving the other waiting out HANG_S."""
    results = on_gloo_ranks(_lockstep, 2, tmp_path)
    expected = [[float(1 + 2 * c)] * 2 for c in range(3)]  # rank0 c + rank1 (1 + c)
    assert [r["sums"] for r in results] == [expected, expected]
    # the ranks connect gloo pairs on first use, as heron's do: with full-mesh connects this
    # test failed "Connection closed by peer" in ~1 of 11 runs on a busy 2-core machine
    assert [r["lazy"] for r in results] == ["1", "1"]


def test_groups_made_later_keep_the_trainer_groups_deadline(tmp_path):
    """``dist.new_group`` does not inherit the default group's timeout (it gets torch's 30 min):
    the checkpoint's and the residency's groups must fail as fast as the trainer's collectives."""
    from heron.checkpoint.dcp_io import save_process_group
    from heron.parallel.data_parallel import init_process_group

    init_process_group(0, 1, dist.FileStore(str(tmp_path / "store"), 1), timeout_s=42.0)
    try:
        groups = {"checkpoint": save_process_group(), "residency": ManagedProcessGroup("trainer", "t").group}
        deadlines = {name: g._get_backend(torch.device("cpu")).options._timeout.total_seconds() for name, g in groups.items()}
        assert deadlines == {"checkpoint": 42.0, "residency": 42.0}
    finally:
        dist.destroy_process_group()
