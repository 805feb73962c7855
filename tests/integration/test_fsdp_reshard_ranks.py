"""``train.reshard_after_forward`` (heron.parallel.data_parallel), with two real gloo ranks in
subprocesses, each trainer rank built as its Ray actor builds it (``rank_parallelize``): with
false the decoder layers are still gathered when the forward ends (no second all-gather in the
backward), with true (the default) they are back to their shards; the update is the same bits
(the same operations on the same gathered weights: tests/tolerance.py, rule 1), and after the
step every unit holds only its shard again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import gathered_parameters, on_gloo_ranks, rank_trainer
from tests.integration.test_old_logprobs_ranks import _train_counted

# exact equalities of kernels' results: also checked under other ATEN_CPU_CAPABILITY values and a busy CPU
pytestmark = pytest.mark.portability

WORLD = 2


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    from torch.distributed.tensor import DTensor

    from heron.config.train import TrainConfig

    results = {}
    for precision in ("fp32", "bf16"):
        for reshard in (True, False):
            trainer = rank_trainer(model_dir, TrainConfig(lr=1e-3, micro_batch_size=2, precision=precision,
                                                          reshard_after_forward=reshard))
            layer = trainer.model.model.layers[0].mlp.gate_proj
            after_forward = []
            hook = trainer.model.register_forward_hook(
                lambda *_: after_forward.append("sharded" if isinstance(layer.weight, DTensor) else "gathered"))
            name = f"{precision}-{'reshard' if reshard else 'keep'}"
            _train_counted(trainer, rank, tmp / f"{name}.pt")  # the weights after the step, from rank 0
            hook.remove()
            results[name] = {"after_forward": after_forward, "unsharded_after_step": gathered_parameters(trainer.model)}
    return results


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("fsdp_reshard_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


def test_kept_layers_stay_gathered_from_forward_to_backward(ranks):
    results, _ = ranks
    for rank, result in enumerate(results):
        for precision in ("fp32", "bf16"):
            assert result[f"{precision}-reshard"]["after_forward"] == ["sharded", "sharded"], rank  # 2 micro-batches
            assert result[f"{precision}-keep"]["after_forward"] == ["gathered", "gathered"], rank
            for how in ("reshard", "keep"):
                assert result[f"{precision}-{how}"]["unsharded_after_step"] == [], (rank, precision, how)


def test_keeping_the_gathered_layers_gives_the_same_update(ranks):
    _, tmp = ranks
    for precision in ("fp32", "bf16"):
        resharded, kept = (torch.load(tmp / f"{precision}-{how}.pt", weights_only=True) for how in ("reshard", "keep"))
        assert resharded.keys() == kept.keys() and resharded
        assert [k for k in resharded if not torch.equal(resharded[k], kept[k])] == [], precision


def test_ddp_refuses_it():
    from heron.config.base import ConfigError
    from heron.config.train import TrainConfig

    with pytest.raises(ConfigError, match="train.reshard_after_forward=false applies to FSDP2"):
        TrainConfig(parallel="ddp", reshard_after_forward=False)
