"""train.gradient_checkpointing under FSDP2 (issue 12, item 2), with two real gloo ranks in
subprocesses: in the backward each sharded decoder layer all-gathers its weights again and
recomputes its activations, and the update equals the run without checkpointing bit for bit on
every rank (the same ops on the same shards in the same order; the recompute repeats them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import MICRO, ROWS, _train_counted
from tests.integration.test_old_logprobs_ranks import _trainer as fsdp2_trainer

WORLD = 2


def _trainer(model_dir: str, checkpointing: bool):
    from heron.trainer.activation_checkpointing import enable_activation_checkpointing

    return fsdp2_trainer(model_dir, enable_activation_checkpointing if checkpointing else None,
                         gradient_checkpointing=checkpointing)


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    results = {}
    for name, checkpointing in (("plain", False), ("checkpointed", True)):
        trainer = _trainer(model_dir, checkpointing)
        mlp_calls = []
        hook = trainer.model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: mlp_calls.append(1))
        results[name] = _train_counted(trainer, rank, tmp / f"{name}.pt")
        hook.remove()
        results[name]["mlp_calls"] = len(mlp_calls)
    return results


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("checkpointing_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


def test_checkpointed_fsdp2_ranks_recompute_and_update_bit_identically(ranks):
    results, tmp = ranks
    for rank, result in enumerate(results):
        plain, checkpointed = result["plain"], result["checkpointed"]
        assert plain["mlp_calls"] == ROWS // MICRO and checkpointed["mlp_calls"] == 2 * plain["mlp_calls"], rank
        assert checkpointed["metrics"] == plain["metrics"], rank
    plain, checkpointed = (torch.load(tmp / f"{name}.pt", weights_only=True) for name in ("plain", "checkpointed"))
    assert plain.keys() == checkpointed.keys() and plain
    assert [k for k in plain if not torch.equal(plain[k], checkpointed[k])] == []
