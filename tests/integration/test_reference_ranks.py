"""The KL reference model on data-parallel ranks (``algo.kl_coef > 0``, heron.trainer.build), with
two real gloo ranks in subprocesses, each trainer rank built as its Ray actor builds it
(``rank_parallelize``).

Under FSDP2 the reference is sharded like the policy (each rank holds 1/N of it: a frozen model
needs no more), gathered layer by layer for its forwards; under DDP it stays whole on every rank
(DDP has nothing to synchronise for a model without gradients). In float32 the sharded
reference's forward is the same operations on the same gathered weights as a whole copy's, so
the update is the same bits (tests/tolerance.py, rule 1). After ``train`` and ``sequence_kl`` (a
forward of the policy and the reference without a backward, which leaves FSDP2's root unit
gathered) every unit of both models holds only its shard again: what a sleep offloads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import gathered_parameters, on_gloo_ranks, rank_trainer
from tests.integration.test_old_logprobs_ranks import _batch

# exact equalities of kernels' results: also checked under other ATEN_CPU_CAPABILITY values and a busy CPU
pytestmark = pytest.mark.portability

WORLD = 2


def _trainer(model_dir: str, parallel: str, shard_reference: bool = True):
    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig

    def whole_reference(parallelize):  # the reference as it was before: a whole copy on every rank
        return lambda model, frozen=False: model if frozen else parallelize(model)

    return rank_trainer(model_dir, TrainConfig(lr=1e-3, micro_batch_size=2, parallel=parallel),
                        algo=AlgoConfig(kl_coef=0.5), wrap=None if shard_reference else whole_reference)


def _numel(model: torch.nn.Module) -> int:
    from torch.distributed.tensor import DTensor

    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in model.parameters())


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    results = {}
    for name, parallel, sharded in (("fsdp2", "fsdp2", True), ("fsdp2_whole", "fsdp2", False), ("ddp", "ddp", True)):
        trainer = _trainer(model_dir, parallel, sharded)
        batch = _batch(trainer.model.config.vocab_size if parallel == "fsdp2" else trainer.model.module.config.vocab_size, rank)
        metrics = trainer.train(batch)
        kl = trainer.sequence_kl(batch)
        weights = trainer.host_weights()
        if rank == 0:
            torch.save(weights, tmp / f"{name}.pt")
        results[name] = {"kl": metrics["kl"], "sequence_kl": kl, "reference_numel": _numel(trainer.reference),
                         "policy_numel": _numel(trainer.model),
                         "policy_gathered": gathered_parameters(trainer.model),
                         "reference_gathered": gathered_parameters(trainer.reference)}
    return results


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("reference_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


def test_fsdp2_shards_the_reference_and_ddp_keeps_it_whole(ranks):
    results, _ = ranks
    whole = results[0]["fsdp2_whole"]["reference_numel"]
    for rank, result in enumerate(results):
        assert result["fsdp2"]["reference_numel"] == result["fsdp2"]["policy_numel"] < whole, rank
        assert result["fsdp2"]["reference_numel"] <= -(-whole // WORLD) + 1024, rank  # ~1/N (dim-0 chunks round up)
        assert result["ddp"]["reference_numel"] == whole, rank
        assert result["fsdp2"]["reference_gathered"] == [] == result["fsdp2"]["policy_gathered"], rank
        assert result["fsdp2_whole"]["policy_gathered"] == [], rank


def test_the_sharded_reference_gives_the_whole_copys_kl_and_update(ranks):
    results, tmp = ranks
    for rank, result in enumerate(results):
        sharded, whole = result["fsdp2"], result["fsdp2_whole"]
        assert sharded["kl"] == whole["kl"] and sharded["sequence_kl"] == whole["sequence_kl"], rank
        assert any(k > 0 for k in sharded["sequence_kl"]), rank  # the step moved the policy off the reference
    sharded, whole = (torch.load(tmp / f"{name}.pt", weights_only=True) for name in ("fsdp2", "fsdp2_whole"))
    assert sharded.keys() == whole.keys() and sharded
    assert [k for k in sharded if not torch.equal(sharded[k], whole[k])] == []
