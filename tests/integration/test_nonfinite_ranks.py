"""Data-parallel ranks agree on non-finite values (issue 9, item 2.7), with two real gloo ranks
(FSDP2) in subprocesses: a loss that is inf on one rank alone (its gradients stay finite, so
the global grad norm does not show it) stops or skips the step on *both* ranks, and a NaN in
one rank's parameter shard stops the checkpoint on both ranks before either writes a file
(sync, and async where the check runs on the staged copy in the background).
Without the agreement the healthy rank would step on and block in the next collective."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import on_gloo_ranks

WORLD = 2


def _inf_loss_on_rank_1(logprobs, old_logprobs, advantages, loss_mask, **kw):
    from heron.algo.policy_loss import ppo_clip_loss

    out = ppo_clip_loss(logprobs, old_logprobs, advantages, loss_mask, **kw)
    if dist.get_rank() == 1:
        out.loss = out.loss + torch.tensor(float("inf"))  # constant: finite gradients
    return out


def _trainer(model_dir: str, on_nonfinite: str):
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    torch.manual_seed(0)
    model = apply_data_parallel(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), "fsdp2")
    cfg = TrainConfig(lr=1e-3, micro_batch_size=2, on_nonfinite=on_nonfinite)
    return DataParallelTrainer(model, cfg, PolicyObjective(AlgoConfig(), policy_loss=_inf_loss_on_rank_1), total_steps=4)


def _batch(vocab: int, rank: int):
    from heron.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(rank)
    mask = torch.zeros(2, 7)
    mask[:, 2:] = 1.0
    return TrainBatch(
        rollout_id=5, policy_version=0, sample_ids=[f"r5/p{rank}/s{i}" for i in range(2)],
        input_ids=torch.randint(0, vocab, (2, 8), generator=g), attention_mask=torch.ones(2, 8, dtype=torch.long),
        loss_mask=mask, advantages=torch.tensor([1.0, -1.0]), old_logprobs=torch.zeros(2, 7),
    )


def _local_params(trainer) -> list[torch.Tensor]:
    return [p.to_local().detach().clone() for p in trainer.model.parameters()]


def _train_once(trainer, rank: int) -> dict:
    from heron.errors import UserError

    before = _local_params(trainer)
    try:
        metrics = trainer.train(_batch(trainer.model.config.vocab_size, rank))
        outcome = {"skipped": metrics["nonfinite_skipped"]}
    except UserError as e:
        outcome = {"error": type(e).__name__, "message": str(e)}
    outcome["unchanged"] = all(torch.equal(a, b) for a, b in zip(before, _local_params(trainer)))
    return outcome


def _save_with_nan_on_rank_1(trainer, rank: int, folder: Path) -> dict:
    from heron.checkpoint.shards import ShardRequest

    if rank == 1:
        with torch.no_grad():
            next(trainer.model.parameters()).to_local()[0] = float("nan")
    try:
        trainer.save_state(ShardRequest(str(folder / "rollout-000007.tmp-1-2"), async_save=False))
        return {"saved": True}
    except Exception as e:  # noqa: BLE001 -- reported to the test
        return {"error": type(e).__name__, "message": str(e)}


def _async_save_with_the_nan(trainer, folder: Path) -> dict:
    """The NaN planted by ``_save_with_nan_on_rank_1`` is still there: an async save checks its
    staged copy in the background (over the save group) and fails from the wait."""
    from heron.checkpoint.shards import ShardRequest

    try:
        trainer.save_state(ShardRequest(str(folder / "rollout-000008.tmp-1-2"), async_save=True))
        trainer.wait_saved()
        return {"saved": True}
    except Exception as e:  # noqa: BLE001 -- reported to the test
        return {"error": type(e).__name__, "message": str(e)}


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    result = {"error": _train_once(_trainer(model_dir, "error"), rank)}
    skipping = _trainer(model_dir, "skip")
    result["skip"] = _train_once(skipping, rank)
    result["save"] = _save_with_nan_on_rank_1(skipping, rank, tmp)
    result["async_save"] = _async_save_with_the_nan(skipping, tmp)
    return result


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    """Both scenarios in one pair of rank processes (a spawn costs seconds of imports)."""
    tmp = tmp_path_factory.mktemp("nonfinite_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir), timeout_s=60), tmp


def test_a_loss_nonfinite_on_one_rank_stops_every_rank(ranks):
    results, _ = ranks
    for rank, result in enumerate(results):
        assert result["error"]["error"] == "NonFiniteError", (rank, result)
        assert result["error"]["unchanged"], rank
    assert "loss=inf" in results[1]["error"]["message"]
    assert "on another rank" in results[0]["error"]["message"]


def test_skip_skips_the_step_on_every_rank(ranks):
    results, _ = ranks
    for rank, result in enumerate(results):
        assert result["skip"] == {"skipped": 1.0, "unchanged": True}, rank


def test_a_nan_shard_stops_the_checkpoint_on_every_rank_before_any_file(ranks):
    results, tmp = ranks
    for mode in ("save", "async_save"):
        for rank, result in enumerate(results):
            assert result[mode]["error"] == "NonFiniteStateError", (mode, rank, result)
        assert "tensor 'model.embed_tokens.weight' holds inf or nan" in results[1][mode]["message"], mode
        assert "another rank" in results[0][mode]["message"], mode
    assert not any(tmp.glob("rollout-*/**/*.distcp"))  # no rank wrote a shard, sync or async
