"""train.balance_ranks on two real gloo ranks (FSDP2) in subprocesses: a GRPO mini-batch of 4
prompts x 2 samples whose first two prompts have advantages and last two none (all rewards equal).
Contiguous shares give rank 0 the four rows that train (two micro-batches of 2) and rank 1 none
(it keeps one row, and must run two forwards too: each is a collective under FSDP2). Dealt
(heron.parallel.rank_balance), each rank gets one prompt with advantages and one without, and runs
one forward. The update equals the contiguous one within the derived round-off bound of another
summation order (tests/tolerance.py), as heron.parallel.dp_trainer's algebra says it must."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from heron.parallel.rank_balance import RankBalance
from heron.parallel.shard_batch import shard_for_ranks
from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import _train_counted, _trainer
from tests.integration.test_packing_ranks import assert_same_rank_updates

pytestmark = pytest.mark.portability

WORLD, ROWS, LENGTH, PROMPT = 2, 8, 10, 3
ADVANTAGES = [1.0, -0.5, 0.5, -0.25, 0.0, 0.0, 0.0, 0.0]
ANSWER_ENDS = [10, 9, 10, 8, 6, 6, 5, 6]  # tokens per row: the rows that train are also the long ones


def _whole_batch(vocab: int):
    """The rollout's batch, the same on every rank (the driver's view)."""
    from heron.trainer.batch import TrainBatch

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (ROWS, LENGTH), generator=g)
    for row in range(ROWS):
        ids[row, :PROMPT] = ids[row - row % 2, :PROMPT]  # rows 2k and 2k+1: one prompt's two samples
    mask = (torch.arange(LENGTH)[None] < torch.tensor(ANSWER_ENDS)[:, None]).long()  # [B, L] right-padded
    loss_mask = mask[:, 1:].float()
    loss_mask[:, : PROMPT - 1] = 0.0  # targets from the first answer token on
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{r // 2}/s{r % 2}" for r in range(ROWS)],
        input_ids=ids * mask, attention_mask=mask, loss_mask=loss_mask, advantages=torch.tensor(ADVANTAGES),
        old_logprobs=torch.zeros(ROWS, LENGTH - 1), prompt_lengths=torch.full((ROWS,), PROMPT),
    )


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    out = {}
    for name, dealt in (("contiguous", False), ("dealt", True)):
        trainer = _trainer(model_dir, eps=1.0)  # eps = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py)
        balance = RankBalance(trainer.skips_zero_advantage_rows, deal=dealt, micro_batch_size=trainer.cfg.micro_batch_size)
        shard = shard_for_ranks(_whole_batch(trainer.model.config.vocab_size), 1, WORLD, balance)[rank]
        out[name] = {**_train_counted(trainer, rank, tmp / f"{name}.pt", lambda _vocab, _rank: shard),
                     "sample_ids": shard.sample_ids}
    return out


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("rank_balance")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


def test_dealt_rows_run_fewer_forwards_and_give_the_contiguous_update(ranks, toy_model_dir):
    results, _ = ranks
    assert [r["contiguous"]["sample_ids"] for r in results] == [
        ["r0/p0/s0", "r0/p0/s1", "r0/p1/s0", "r0/p1/s1"], ["r0/p2/s0", "r0/p2/s1", "r0/p3/s0", "r0/p3/s1"]]
    # work by prompt: 19 and 18 tokens that train, 0 and 0; dealt: 19 + 0 | 18 + 0, each prompt whole
    assert [r["dealt"]["sample_ids"] for r in results] == [
        ["r0/p0/s0", "r0/p0/s1", "r0/p3/s0", "r0/p3/s1"], ["r0/p1/s0", "r0/p1/s1", "r0/p2/s0", "r0/p2/s1"]]
    assert [r["contiguous"]["forwards"] for r in results] == [2, 2]  # rank 1 fills in to match rank 0
    assert [r["dealt"]["forwards"] for r in results] == [1, 1]
    assert_same_rank_updates(ranks, toy_model_dir, "dealt", "contiguous", ("loss", "pg_loss"), ROWS * LENGTH)
