"""heron.parallel.rank_balance: which rows of a mini-batch each data-parallel rank trains
(train.balance_ranks). Hand-worked deals, the invariants every deal keeps (each row on exactly
one rank, equal row counts, a prompt's samples together, never worse than contiguous), and the
work measure. The update's equivalence on real gloo ranks: tests/integration/test_rank_balance_ranks.py."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from heron.parallel.rank_balance import RankBalance, deal, imbalance, prompt_runs, rank_work
from heron.parallel.shard_batch import rank_rows, shard_for_ranks
from heron.trainer.batch import TrainBatch


def _batch(lengths: list[int], advantages: list[float], prompts: list[int] | None = None, prompt_length: int = 2) -> TrainBatch:
    """Right-padded rows of ``lengths`` tokens; rows with the same ``prompts`` id share their first
    ``prompt_length`` tokens (the others differ there)."""
    rows, width = len(lengths), max(lengths)
    ids = torch.arange(rows * width).reshape(rows, width) + 100
    if prompts is not None:
        for row, prompt in enumerate(prompts):
            ids[row, :prompt_length] = torch.tensor([prompt + 1] * prompt_length)
    mask = torch.zeros(rows, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    loss_mask = mask[:, 1:].float()
    loss_mask[:, : prompt_length - 1] = 0.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"s{i}" for i in range(rows)], input_ids=ids * mask,
        attention_mask=mask, loss_mask=loss_mask, advantages=torch.tensor(advantages), old_logprobs=torch.zeros(rows, width - 1),
        prompt_lengths=None if prompts is None else torch.full((rows,), prompt_length),
    )


def test_deal_hand_worked():
    # rows: 9 -> rank 0, 8 -> rank 1, 2 -> rank 1 (8 < 9), 1 -> rank 0 (the only one with room)
    assert deal([9, 8, 2, 1], 1, 2) == [[0, 3], [1, 2]]
    # units of 2 rows, work 10, 2, 8, 0: 10 -> rank 0, 8 -> rank 1, 2 -> rank 1, 0 -> rank 0
    assert deal([5, 5, 1, 1, 4, 4, 0, 0], 2, 2) == [[0, 1, 6, 7], [2, 3, 4, 5]]
    # ties go to the lower rank, so equal work deals round-robin
    assert deal([1, 1, 1, 1, 1, 1], 1, 3) == [[0, 3], [1, 4], [2, 5]]
    assert deal([3, 1, 2], 1, 1) == [[0, 1, 2]]


def test_the_work_of_a_rank_and_the_imbalance():
    work = [9, 8, 2, 1]
    assert rank_work([[0, 1], [2, 3]], work) == [17, 3]
    assert imbalance([[0, 1], [2, 3]], work) == pytest.approx(17 / 10)
    assert imbalance([[0, 3], [1, 2]], work) == 1.0
    assert imbalance([[0, 1], [2, 3]], [0, 0, 0, 0]) == 1.0


@pytest.mark.parametrize("seed", range(40))
def test_every_deal_keeps_the_invariants(seed):
    rng = random.Random(seed)
    world = rng.randint(1, 4)
    unit = rng.randint(1, 3)
    rows = world * unit * rng.randint(1, 4)
    work = [rng.choice([0, rng.randint(1, 50)]) for _ in range(rows)]
    shares = deal(work, unit, world)
    assert sorted(i for share in shares for i in share) == list(range(rows))  # each row on exactly one rank
    assert {len(share) for share in shares} == {rows // world}  # equal counts
    assert all(share == sorted(share) for share in shares)
    for share in shares:  # units stay whole
        assert set(share) == {i for u in {j // unit for j in share} for i in range(u * unit, (u + 1) * unit)}


@pytest.mark.parametrize("seed", range(40))
def test_shares_are_never_worse_than_contiguous(seed):
    rng = random.Random(seed)
    world = rng.randint(1, 4)
    rows = world * rng.randint(1, 4)
    batch = _batch([rng.randint(2, 12) for _ in range(rows)], [rng.choice([0.0, 1.0, -1.0]) for _ in range(rows)])
    for skips in (False, True):
        for micro in (0, 2):
            balance = RankBalance(skips_zero_advantage=skips, micro_batch_size=micro)
            work, size = balance.work(batch), rows // world
            contiguous = [list(range(r * size, (r + 1) * size)) for r in range(world)]
            shares = balance.shares(batch, world)
            assert max(rank_work(shares, work)) <= max(rank_work(contiguous, work))
            assert balance.forwards(shares, work) <= balance.forwards(contiguous, work)


def test_work_counts_the_tokens_of_the_rows_a_rank_trains():
    batch = _batch([5, 3, 4, 2], [1.0, 0.0, -0.5, 0.0])
    assert RankBalance(skips_zero_advantage=False).work(batch) == [5, 3, 4, 2]
    assert RankBalance(skips_zero_advantage=True).work(batch) == [5, 0, 4, 0]
    per_token = torch.zeros(4, 4)  # token-level advantages (gae)
    per_token[0, 2] = 0.3  # on a loss position of row 0
    per_token[3, 3] = 0.3  # past row 3's end (it has 2 tokens): no gradient
    assert RankBalance(skips_zero_advantage=True).work(replace(batch, advantages=per_token)) == [5, 0, 0, 0]


def test_a_prompts_samples_are_one_unit_where_the_runs_divide_evenly():
    grpo = _batch([4] * 8, [1.0] * 8, prompts=[0, 0, 1, 1, 2, 2, 3, 3])
    assert prompt_runs(grpo, 2) == 2 and prompt_runs(grpo, 4) == 2
    assert prompt_runs(grpo, 3) == 1  # 4 prompts do not divide by 3 ranks
    assert prompt_runs(_batch([4] * 6, [1.0] * 6, prompts=[0, 0, 0, 1, 2, 2]), 2) == 1  # runs of 3, 1 and 2
    assert prompt_runs(_batch([4] * 4, [1.0] * 4, prompts=[0, 1, 0, 1]), 2) == 1  # a prompt in two runs
    assert prompt_runs(_batch([4] * 4, [1.0] * 4), 2) == 1  # no prompt lengths


def test_shares_deal_when_it_lowers_the_largest_rank_and_keep_contiguous_otherwise():
    balance = RankBalance(skips_zero_advantage=True)
    # GRPO mini-batch, 4 prompts x 2 samples: prompts 0 and 1 have advantages, 2 and 3 do not
    lopsided = _batch([9, 8, 7, 6, 5, 5, 5, 5], [1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0], prompts=[0, 0, 1, 1, 2, 2, 3, 3])
    assert balance.shares(lopsided, 2) == [[0, 1, 6, 7], [2, 3, 4, 5]]  # prompt 0 (17) | prompt 1 (13), whole
    assert RankBalance(skips_zero_advantage=True, deal=False).shares(lopsided, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # without skipping: contiguous 30 | 20, the deal 27 | 23
    assert RankBalance(skips_zero_advantage=False).shares(lopsided, 2) == [[0, 1, 6, 7], [2, 3, 4, 5]]
    even = _batch([4] * 8, [1.0] * 8, prompts=[0, 0, 1, 1, 2, 2, 3, 3])
    assert balance.shares(even, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # nothing to win: contiguous


def test_a_deal_that_would_add_a_micro_batch_keeps_the_contiguous_shares():
    """Every rank runs as many micro-batches as the one with the most trained rows, and each costs
    a fixed share tokens do not count. Work 0 4 0 4 | 0 20 0 4: dealt 20 | 12 is lower than
    contiguous 8 | 24, but puts 3 trained rows on rank 1: 2 micro-batches of 2 rows, not 1."""
    batch = _batch([4, 4, 4, 4, 4, 20, 4, 4], [0.0, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0, -1.0])
    assert RankBalance(True).work(batch) == [0, 4, 0, 4, 0, 20, 0, 4]
    assert RankBalance(True).shares(batch, 2) == [[2, 4, 5, 6], [0, 1, 3, 7]]  # micro-batches not counted
    counted = RankBalance(True, micro_batch_size=2)
    assert counted.forwards([[2, 4, 5, 6], [0, 1, 3, 7]], counted.work(batch)) == 2
    assert counted.shares(batch, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert RankBalance(True, micro_batch_size=4).shares(batch, 2) == [[2, 4, 5, 6], [0, 1, 3, 7]]  # 1 either way


def test_rank_rows_deal_every_mini_batch_in_step_order():
    balance = RankBalance(skips_zero_advantage=False)
    batch = _batch([9, 1, 1, 9, 1, 1, 9, 9], [1.0] * 8)  # two mini-batches of 4 rows
    assert rank_rows(batch, 2, 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    # mini-batch 0 (work 9 1 1 9) is even already; mini-batch 1 (1 1 9 9): 10 | 10 instead of 2 | 18
    assert rank_rows(batch, 2, 2, balance) == [[0, 1, 4, 6], [2, 3, 5, 7]]
    shards = shard_for_ranks(batch, 2, 2, balance)
    assert shards[0].sample_ids == ["s0", "s1", "s4", "s6"]
    assert torch.equal(shards[1].attention_mask, batch.attention_mask[[2, 3, 5, 7]])
    assert shards[1].input_ids.shape == batch.input_ids[:4].shape  # the whole batch's padding
    with pytest.raises(ValueError, match="equal rank shares"):
        rank_rows(batch, 2, 3, balance)
