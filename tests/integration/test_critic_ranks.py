"""A data-parallel critic (heron.parallel.dp_critic), with two real gloo ranks in subprocesses
under FSDP2 and DDP: each rank trains on its share of the mini-batch, and the update and the
step metrics equal one critic's on the whole batch within the round-off of another summation
order (tests/tolerance.py, rules 2 and 3) -- the loss normaliser is the global token count, the
grad norm the global one. Rank 0 alone writes the checkpoint's critic/state.json; the DCP shards
of both ranks load back into a one-process critic (resharded) with the same weights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import LENGTH, MICRO, ROWS, _batch

WORLD = 2


def _spec(model_dir: str, parallel: str = "fsdp2"):
    from heron.config.critic import CriticConfig
    from heron.config.model import ModelConfig
    from heron.config.train import TrainConfig
    from heron.critic.build import CriticSpec

    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return CriticSpec(critic=CriticConfig(lr=1e-2, eps=1.0), model=ModelConfig(path=model_dir),
                      train=TrainConfig(micro_batch_size=MICRO, parallel=parallel), seed=0)


def _critic_batch(vocab: int, rank: int):
    batch = _batch(vocab, rank)
    if rank == 1:  # fewer loss tokens than rank 0: a per-rank normaliser would weigh the ranks wrongly
        batch = replace(batch, loss_mask=batch.loss_mask * (torch.arange(LENGTH - 1) >= 5))
    g = torch.Generator().manual_seed(10 + rank)
    returns = torch.rand(batch.loss_mask.shape, generator=g) * batch.loss_mask  # [B, L-1]
    return replace(batch, returns=returns, old_values=0.1 * returns)


def _vocab(model_dir: str) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir).vocab_size


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    from heron.checkpoint.shards import ShardRequest
    from heron.critic.build import build_critic
    from heron.parallel.data_parallel import apply_data_parallel, full_state_dict
    from heron.parallel.dp_critic import DataParallelCritic

    results = {}
    for parallel in ("fsdp2", "ddp"):
        critic = build_critic(_spec(model_dir, parallel), parallelize=lambda m, k=parallel: apply_data_parallel(m, k),
                              critic_cls=DataParallelCritic)
        results[parallel] = critic.train(_critic_batch(_vocab(model_dir), rank))
        state = full_state_dict(critic.model)  # collective
        if rank == 0:
            torch.save(state, tmp / f"{parallel}.pt")
        if parallel == "fsdp2":
            (tmp / "ckpt").mkdir(exist_ok=True)
            critic.save_state(ShardRequest(folder=str(tmp / "ckpt"), async_save=False))
            critic.wait_saved()
    return results


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("critic_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


@pytest.fixture(scope="module")
def single(toy_model_dir):
    """One critic on both ranks' rows (rank r's share of the one mini-batch is its rows)."""
    from heron.critic.build import build_critic
    from heron.parallel.shard_batch import concat

    critic = build_critic(_spec(str(toy_model_dir)))
    initial = {k: v.clone() for k, v in critic.model.state_dict().items()}
    vocab = _vocab(str(toy_model_dir))
    metrics = critic.train(concat([_critic_batch(vocab, r) for r in range(WORLD)]))
    return {"metrics": metrics, "initial": initial, "state": critic.model.state_dict(), "config": critic.model.backbone.config}


@pytest.mark.parametrize("parallel", ["fsdp2", "ddp"])
def test_data_parallel_critic_gives_the_single_critic_update(ranks, single, parallel):
    from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length

    results, tmp = ranks
    n = reduction_length(single["config"], tokens=WORLD * ROWS * LENGTH)
    assert_updates_close(torch.load(tmp / f"{parallel}.pt", weights_only=True), single["state"], single["initial"], n=n, steps=1)
    expected = single["metrics"]
    for rank, result in enumerate(results):
        metrics = result[parallel]
        assert metrics.keys() == expected.keys() - {"value_mean", "explained_variance"}, rank  # those need the whole batch
        for key in ("value_loss", "grad_norm"):
            assert_sums_close(metrics[key], expected[key], n=n, magnitude=abs(expected[key]) + 1.0, what=f"{key} rank {rank}")
        assert metrics["clip_frac"] == expected["clip_frac"] and metrics["nonfinite_skipped"] == 0.0


def test_both_ranks_shards_load_into_one_critic(ranks, toy_model_dir):
    from heron.checkpoint.reader import Checkpoint
    from heron.critic.build import build_critic

    _, tmp = ranks
    folder = tmp / "ckpt"
    assert (folder / "critic" / "state.json").is_file()
    critic = build_critic(_spec(str(toy_model_dir)))
    critic.load_state(Checkpoint(folder, rollout_id=0, state={}, num_bytes=0))  # the critic reads only its folder
    saved = torch.load(tmp / "fsdp2.pt", weights_only=True)
    assert [k for k, v in critic.model.state_dict().items() if not torch.equal(v, saved[k])] == []
    assert bool(critic.model.value_head.weight.detach().abs().sum() > 0)
