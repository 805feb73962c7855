"""Data-parallel ranks leave different numbers of zero-advantage rows out of the step
(train.skip_zero_advantage), with two real gloo ranks (FSDP2) in subprocesses. Rank 0 has one row
with an advantage (one micro-batch of 2 rows), rank 1 four (two): every forward is a collective
under FSDP2, so rank 0 must run two forwards as well (a rank that ran fewer would hang the other)
and takes a left-out row back in. With two steps per rollout the pi_old forward over the whole
batch does the same (rank 0: one row with an advantage, rank 1: four), and each step's mini-batch
of 2 rows is one micro-batch on both ranks (rank 0's first has no advantage at all: its shortest
row runs). The update equals the every-row one within the derived
round-off bound (tests/tolerance.py: only the rows per matmul, and so the summation order, change)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import LENGTH, ROWS, _batch, _train_counted, _trainer
from tests.integration.test_packing_ranks import assert_same_rank_updates

WORLD = 2
ADVANTAGES = {0: [0.0, 0.0, 0.75, 0.0], 1: [1.0, -0.5, 0.5, 0.25]}  # rows with a gradient: 1 on rank 0, 4 on rank 1


def _rank_batch(vocab: int, rank: int):
    return replace(_batch(vocab, rank), advantages=torch.tensor(ADVANTAGES[rank]))


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    runs = {"skip": {}, "every_row": {"skip_zero_advantage": False},
            "skip_two_steps": {"steps_per_rollout": 2}, "every_row_two_steps": {"steps_per_rollout": 2, "skip_zero_advantage": False}}
    # eps = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return {name: _train_counted(_trainer(model_dir, eps=1.0, **kw), rank, tmp / f"{name}.pt", _rank_batch)
            for name, kw in runs.items()}


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("zero_advantage_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


@pytest.mark.portability
def test_ranks_skip_their_own_rows_and_give_the_every_row_update(ranks, toy_model_dir):
    results, _ = ranks
    assert [r["skip"]["forwards"] for r in results] == [2, 2] and [r["every_row"]["forwards"] for r in results] == [2, 2]
    # the rank mean of the share left out: rank 0 trained 2 of 4 rows (one taken back in), rank 1 all 4
    assert results[0]["skip"]["metrics"]["zero_advantage_skipped"] == pytest.approx((0.5 + 0.0) / 2)
    assert_same_rank_updates(ranks, toy_model_dir, "skip", "every_row", ("loss", "pg_loss"), WORLD * ROWS * LENGTH)


def test_ranks_skip_their_own_rows_in_the_pi_old_forward(ranks, toy_model_dir):
    results, _ = ranks
    # pi_old forward: 2 micro-batches on both ranks (rank 0 fills in a row), then 1 per step
    assert [r["skip_two_steps"]["forwards"] for r in results] == [4, 4]
    assert [r["every_row_two_steps"]["forwards"] for r in results] == [4, 4]
    assert all(r["skip_two_steps"]["metrics"]["old_logprobs_recomputed"] == 1.0 for r in results)
    assert_same_rank_updates(ranks, toy_model_dir, "skip_two_steps", "every_row_two_steps", ("loss", "pg_loss"),
                             WORLD * ROWS * LENGTH, steps=2)
