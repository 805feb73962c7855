"""heron.rollout.batch_rows: which prompts are prefilled and which rows stay in the decode batch
(hand-worked cases)."""

import torch

from heron.rollout.batch_rows import distinct_prompts, prefill_groups, rows_to_keep


def test_distinct_prompts_maps_every_request_to_its_first_occurrence():
    prompts = [[1, 2], [3], [1, 2], [4, 5, 6], [3], [1, 2]]
    distinct, index = distinct_prompts(prompts, share=True, min_rows=1)
    assert distinct == [[1, 2], [3], [4, 5, 6]]
    assert index == [0, 1, 0, 2, 1, 0]


def test_distinct_prompts_prefills_every_row_when_not_sharing_or_all_distinct():
    prompts = [[1, 2], [3], [1, 2]]
    assert distinct_prompts(prompts, share=False, min_rows=1) == (prompts, None)
    assert distinct_prompts([[1], [2]], share=True, min_rows=1) == ([[1], [2]], None)


def test_distinct_prompts_keeps_the_prefill_at_min_rows_tokens():
    prompts = [[1, 2, 3]] * 4 + [[4]] * 4  # P = 3: all rows give 24 prefill tokens, the 2 distinct 6
    assert distinct_prompts(prompts, share=True, min_rows=16)[1] is None
    assert distinct_prompts(prompts, share=True, min_rows=6)[1] == [0] * 4 + [1] * 4


def test_rows_to_keep_drops_finished_rows_down_to_min_rows():
    active = torch.tensor([True, False, True, False, False, True])
    assert rows_to_keep(active, min_rows=1).tolist() == [0, 2, 5]
    assert rows_to_keep(active, min_rows=4).tolist() == [0, 1, 2, 5]  # the first finished row fills up
    assert rows_to_keep(active, min_rows=6) is None  # nothing to drop
    assert rows_to_keep(torch.ones(3, dtype=torch.bool), min_rows=1) is None


def test_prefill_groups_splits_where_the_padding_saved_pays_for_the_forward():
    # sorted: 150 (1), 140 (3), 12 (2), 10 (0). Costs with 64 per forward: one group 4 x 150 + 64
    # = 664; {150, 140} {12, 10}: 300 + 64 + 24 + 64 = 452; {150} {140} {12, 10}: 150 + 64 + 140
    # + 64 + 24 + 64 = 506; {150, 140} {12} {10}: 300 + 64 + 12 + 64 + 10 + 64 = 514.
    assert prefill_groups([10, 150, 12, 140], forward_tokens=64) == [[1, 3], [2, 0]]
    # a forward as costly as 300 tokens: 4 x 150 + 300 = 900 beats 300 + 300 + 24 + 300 = 924
    assert prefill_groups([10, 150, 12, 140], forward_tokens=300) == [[0, 1, 2, 3]]
    assert prefill_groups([10, 150, 12, 140], forward_tokens=0) == [[1], [3], [2], [0]]


def test_prefill_groups_keeps_one_group_in_order_when_splitting_saves_little():
    assert prefill_groups([6, 1, 3, 10, 2, 7], forward_tokens=64) == [[0, 1, 2, 3, 4, 5]]
    assert prefill_groups([100] * 8, forward_tokens=0) == [list(range(8))]
