"""The gloo-rank harness (tests/gloo_ranks.py) fails a hung scenario at its deadline, naming the
rank, instead of leaving it to pytest's timeout (a hang outside any collective never reaches
gloo's own timeout: a save waiting on a Future that never completes did, once)."""

import time

import pytest

from tests.gloo_ranks import on_gloo_ranks


def _rank_1_hangs(rank: int, tmp) -> dict:
    if rank == 1:
        time.sleep(3600)
    return {"rank": rank}


def _both_answer(rank: int, tmp) -> dict:
    return {"rank": rank}


def test_a_hung_rank_fails_the_call_at_its_deadline(tmp_path):
    # rank 0 may still be importing under a heavy load when the deadline comes: it is named then too
    with pytest.raises(TimeoutError, match=r"gloo ranks \[(0, )?1\] of 2 still running after 20 s; killed"):
        on_gloo_ranks(_rank_1_hangs, 2, tmp_path, deadline_s=20)


def test_ranks_that_finish_return_their_results(tmp_path):
    assert on_gloo_ranks(_both_answer, 2, tmp_path) == [{"rank": 0}, {"rank": 1}]
