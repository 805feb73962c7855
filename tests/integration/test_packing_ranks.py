"""Packed micro-batches on data-parallel ranks (train.max_tokens_per_micro_batch, issue 14 item
5), with two real gloo ranks (FSDP2) in subprocesses. The ranks' rows differ in length, so under
one token budget rank 0 packs two micro-batches and rank 1 one; every forward/backward is a
collective under FSDP2, so rank 1 must split its micro-batch and run two as well (a rank that ran
fewer would hang the other). The packed update equals the row-count one within the derived
round-off bound (tests/tolerance.py: only the grouping and padded length of the sums change)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import _train_counted, _trainer
from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length

WORLD, ROWS, LENGTH = 2, 4, 10
ROW_LENGTHS = {0: [10, 10, 10, 10], 1: [5, 5, 4, 4]}  # tokens per row on each rank
BUDGET = 20  # rank 0: 2 rows x 10 per micro-batch (2 of them); rank 1: all 4 rows x 5 fit in one


def _batch(vocab: int, rank: int):
    from heron.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(rank)
    attention = torch.zeros(ROWS, LENGTH, dtype=torch.long)  # [B, L]
    mask = torch.zeros(ROWS, LENGTH - 1)  # [B, L-1]
    for i, n in enumerate(ROW_LENGTHS[rank]):
        attention[i, :n] = 1
        mask[i, 2 : n - 1] = 1.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{rank}/s{i}" for i in range(ROWS)],
        input_ids=torch.randint(0, vocab, (ROWS, LENGTH), generator=g), attention_mask=attention,
        loss_mask=mask, advantages=torch.tensor([1.0, -0.5, 0.5, 0.25]), old_logprobs=torch.zeros(ROWS, LENGTH - 1),
    )


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    runs = {"rows": {}, "packed": {"max_tokens_per_micro_batch": BUDGET}}
    # eps = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return {name: _train_counted(_trainer(model_dir, eps=1.0, **kw), rank, tmp / f"{name}.pt", _batch) for name, kw in runs.items()}


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("packing_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


@pytest.mark.portability
def test_packed_ranks_run_as_many_micro_batches_and_give_the_row_count_update(ranks, toy_model_dir):
    results, _ = ranks
    assert [r["packed"]["forwards"] for r in results] == [2, 2]  # rank 1 split its one micro-batch
    assert_same_rank_updates(ranks, toy_model_dir, "packed", "rows", ("loss", "pg_loss", "entropy"), WORLD * ROWS * LENGTH)


def assert_same_rank_updates(ranks, model_dir, actual: str, expected: str, keys, tokens: int, steps: int = 1) -> None:
    """Scenario ``actual`` gives scenario ``expected``'s metrics ``keys`` and grad norm on every rank,
    and its update after ``steps`` optimizer steps, within the derived round-off bound of another
    summation order."""
    from transformers import AutoConfig

    from heron.models import load_model

    results, tmp = ranks
    config = AutoConfig.from_pretrained(model_dir)
    n = reduction_length(config, tokens=tokens)
    log_vocab = math.log(config.vocab_size)
    for result in results:
        got, want = result[actual]["metrics"], result[expected]["metrics"]
        for key in keys:
            assert_sums_close(got[key], want[key], n=n, magnitude=abs(want[key]) + log_vocab, what=key)
        assert_sums_close(got["grad_norm"], want["grad_norm"], n=n, magnitude=want["grad_norm"], what="grad_norm")
    initial = load_model(str(model_dir), "float32").state_dict()
    got_w, want_w = (torch.load(tmp / f"{name}.pt", weights_only=True) for name in (actual, expected))
    assert_updates_close(got_w, want_w, {k: initial[k] for k in want_w}, n=n, steps=steps)
