"""heron.rollout.batch_rows: which prompts are prefilled and which rows stay in the decode batch
(hand-worked cases)."""

import torch

from heron.rollout.batch_rows import distinct_prompts, rows_to_keep


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
