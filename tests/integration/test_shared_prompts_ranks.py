"""Shared prompts in the training forward (train.share_prompts, heron.trainer.shared_prompts) on two
real gloo ranks (FSDP2) in subprocesses, two micro-batches of two rows each. The ranks pack different
shapes (rank 0: two prompts of two samples, rank 1: one prompt of four, with its own prompt and answer
lengths), and FSDP2's collectives run per forward, not per row; the
update equals the padded rows' within the derived round-off bound (tests/tolerance.py: only the
grouping of the sums changes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import MICRO, _train_counted, _trainer
from tests.integration.test_packing_ranks import assert_same_rank_updates

WORLD, ROWS, LENGTH = 2, 4, 14
PROMPTS = {0: [[5, 6, 7, 8], [5, 6, 7, 8], [9, 10, 11], [9, 10, 11]], 1: [[12, 13, 14, 15, 16, 17]] * 4}


def _batch(vocab: int, rank: int):
    from heron.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(rank)
    input_ids = torch.zeros(ROWS, LENGTH, dtype=torch.long)  # [B, L]
    attention = torch.zeros(ROWS, LENGTH, dtype=torch.long)  # [B, L]
    mask = torch.zeros(ROWS, LENGTH - 1)  # [B, L-1]
    for i, prompt in enumerate(PROMPTS[rank]):
        answer = torch.randint(18, vocab, (5 + 2 * i,), generator=g)[: LENGTH - len(prompt)]
        n = len(prompt) + len(answer)
        input_ids[i, :n] = torch.cat([torch.tensor(prompt), answer])
        attention[i, :n] = 1
        mask[i, len(prompt) - 1 : n - 1] = 1.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{rank}/s{i}" for i in range(ROWS)], input_ids=input_ids,
        attention_mask=attention, loss_mask=mask, advantages=torch.tensor([1.0, -0.5, 0.5, -1.0]),
        old_logprobs=torch.zeros(ROWS, LENGTH - 1), prompt_lengths=torch.tensor([len(p) for p in PROMPTS[rank]]),
    )


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    runs = {"shared": {}, "padded": {"share_prompts": False}}
    # eps = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    return {name: _train_counted(_trainer(model_dir, eps=1.0, **kw), rank, tmp / f"{name}.pt", _batch)
            for name, kw in runs.items()}


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("shared_prompts_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


@pytest.mark.portability
def test_shared_prompts_on_fsdp2_ranks_give_the_padded_update(ranks, toy_model_dir):
    results, _ = ranks
    assert [r["padded"]["rows"] for r in results] == [[MICRO, MICRO]] * WORLD
    assert [r["shared"]["rows"] for r in results] == [[1, 1]] * WORLD  # one packed row per prompt
    assert_same_rank_updates(ranks, toy_model_dir, "shared", "padded", ("loss", "pg_loss", "entropy"), WORLD * ROWS * LENGTH)
