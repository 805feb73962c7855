"""Data-parallel ranks skip the old-logprob forward exactly as one process does (issue 14,
item 2), with two real gloo ranks (FSDP2) in subprocesses: one step on-policy runs only the
training forwards on every rank (under FSDP2 each forward all-gathers the weights, so a rank that
decided otherwise would hang the other), reports ``old_logprobs_recomputed`` 0, and gives the same
update as ``train.old_logprobs_forward=always``; several steps per rollout recompute on every rank.

Equivalence is bit for bit: both runs do the same operations on the same rank shards in the same
order; only where pi_old comes from differs, and its values are the same bits (see
tests/unit/test_trainer_old_logprobs.py). The Ray TrainerGroup runs this same
``DataParallelTrainer.train`` in each rank actor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks

WORLD, ROWS, LENGTH, MICRO = 2, 4, 10, 2  # rows per rank: 2 micro-batches per step


def _trainer(model_dir: str, prepare=None, **train_kw):
    """An FSDP2 trainer of the toy model from seed 0; ``prepare(model)`` runs before sharding, as
    build_trainer orders it (activation checkpointing, compile); ``train_kw`` override TrainConfig's
    lr=1e-3 and micro_batch_size=MICRO."""
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if prepare is not None:
        prepare(model)
    cfg = TrainConfig(**{"lr": 1e-3, "micro_batch_size": MICRO, **train_kw})
    return DataParallelTrainer(apply_data_parallel(model, "fsdp2"), cfg, PolicyObjective(AlgoConfig()), total_steps=4)


def _batch(vocab: int, rank: int):
    from heron.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(rank)
    mask = torch.zeros(ROWS, LENGTH - 1)
    mask[:, 3:] = 1.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{rank}/s{i}" for i in range(ROWS)],
        input_ids=torch.randint(0, vocab, (ROWS, LENGTH), generator=g), attention_mask=torch.ones(ROWS, LENGTH, dtype=torch.long),
        loss_mask=mask, advantages=torch.tensor([1.0, -0.5, 0.5, 0.25]), old_logprobs=torch.zeros(ROWS, LENGTH - 1),
    )


def _train_counted(trainer, rank: int, out: Path, make_batch=None) -> dict:
    """Trains on ``make_batch(vocab, rank)`` (default ``_batch``), recording the rows of every
    forward the model sees."""
    rows = []
    hook = trainer.model.register_forward_hook(lambda _m, _a, kwargs, _o: rows.append(kwargs["input_ids"].shape[0]),
                                               with_kwargs=True)
    metrics = trainer.train((make_batch or _batch)(trainer.model.config.vocab_size, rank))
    hook.remove()
    weights = trainer.host_weights()  # full weights on rank 0, {} elsewhere
    if rank == 0:
        torch.save(weights, out)
    return {"forwards": len(rows), "rows": rows, "metrics": metrics}


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    runs = {"auto": {}, "always": {"old_logprobs_forward": "always"}, "two_steps": {"steps_per_rollout": 2}}
    return {name: _train_counted(_trainer(model_dir, **kw), rank, tmp / f"{name}.pt") for name, kw in runs.items()}


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("old_logprobs_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


def test_every_rank_skips_the_forward_on_policy_and_recomputes_where_needed(ranks):
    results, _ = ranks
    micro_batches = ROWS // MICRO
    for rank, result in enumerate(results):
        assert result["auto"]["forwards"] == micro_batches, rank
        assert result["auto"]["metrics"]["old_logprobs_recomputed"] == 0.0, rank
        assert result["always"]["forwards"] == 2 * micro_batches, rank
        assert result["always"]["metrics"]["old_logprobs_recomputed"] == 1.0, rank
        assert result["two_steps"]["forwards"] == 2 * micro_batches, rank  # recompute + 2 steps x 1 micro-batch
        assert result["two_steps"]["metrics"]["old_logprobs_recomputed"] == 1.0, rank


def test_the_skip_gives_the_recompute_update_on_every_rank(ranks):
    results, tmp = ranks
    for rank, result in enumerate(results):
        skip, full = dict(result["auto"]["metrics"]), dict(result["always"]["metrics"])
        assert skip.pop("old_logprobs_recomputed") == 0.0 and full.pop("old_logprobs_recomputed") == 1.0
        # the recompute is one more forward of every row, a third of a forward and backward
        assert full.pop("model_flops") == pytest.approx(skip.pop("model_flops") * 4 / 3, rel=1e-6), rank
        assert skip == full, rank
        assert skip["pg_loss"] != 0.0
    skip, full = (torch.load(tmp / f"{name}.pt", weights_only=True) for name in ("auto", "always"))
    assert skip.keys() == full.keys() and skip
    for name in full:
        assert torch.equal(skip[name], full[name]), name


def test_model_flops_are_both_ranks_total_on_every_rank(ranks, toy_model_dir):
    """Each rank trained 4 rows of LENGTH tokens; train() reports all 8 rows' FLOPs on both ranks
    (all-reduced with SUM, heron.trainer.model_flops), so the metrics' rank mean is the total."""
    from heron.preflight.meta_model import meta_model
    from heron.trainer.model_flops import forward_cost

    results, _ = ranks
    expected = float(forward_cost(meta_model(str(toy_model_dir))).training(torch.full((WORLD * ROWS,), LENGTH)))
    for rank, result in enumerate(results):
        assert result["auto"]["metrics"]["model_flops"] == pytest.approx(expected, rel=1e-6), rank
