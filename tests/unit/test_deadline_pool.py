"""heron.reward.deadline_pool: results in call order, failures returned not raised, a batch runs on
at most ``workers`` threads while no call times out, and an abandoned call's late result never
lands. The scorer's own tests (test_reward_scorer.py, test_reward_values.py) cover the deadline
through the reward stage."""

import threading

import pytest

from heron.reward.deadline_pool import run_with_deadlines
from tests.concurrency_probe import ConcurrencyProbe


class Halt(BaseException):
    """Not an Exception: a call may raise anything and still get a result."""


def _square_or_raise(x):
    if x == 3:
        raise ValueError("three")
    if x == 5:
        raise Halt("five")
    return x * x


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("timeout", [None, 600.0])
def test_results_in_call_order_with_failures_as_values(workers, timeout):
    results = run_with_deadlines(_square_or_raise, [(x,) for x in range(8)], workers, timeout)
    assert [r if not isinstance(r, BaseException) else type(r).__name__ for r in results] == [
        0, 1, 4, "ValueError", 16, "Halt", 36, 49]


def test_empty_batch():
    assert run_with_deadlines(_square_or_raise, [], 4, 1.0) == []


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_batch_runs_on_at_most_workers_threads(workers):
    """The point of the pool: threads per batch, not per call."""
    threads = set()

    def record(x):
        threads.add(threading.get_ident())
        return x

    assert run_with_deadlines(record, [(x,) for x in range(64)], workers, 600.0) == list(range(64))
    assert 1 <= len(threads) <= workers


def test_workers_calls_run_at_once():
    probe = ConcurrencyProbe(expected=3, total=9)

    def slow(x):
        with probe:
            return x

    assert run_with_deadlines(slow, [(x,) for x in range(9)], 3, None) == list(range(9))
    assert not probe.timed_out and probe.max_in_flight == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_a_timed_out_call_is_replaced_and_its_late_result_never_lands(workers):
    """Call 1 blocks until released after the batch returned: it gets a TimeoutError, the calls
    after it still run (a fresh thread took its place), and when it finally returns its thread
    leaves without writing into the results."""
    release, returned = threading.Event(), threading.Event()

    def hangs_on_one(x):
        if x == 1:
            release.wait(600)
            returned.set()
            return "late"
        return x

    try:
        results = run_with_deadlines(hangs_on_one, [(x,) for x in range(5)], workers, 0.2)
        assert not release.is_set()
        assert isinstance(results[1], TimeoutError) and "reward.timeout_s=0.2" in str(results[1])
        assert results[:1] + results[2:] == [0, 2, 3, 4]
    finally:
        release.set()
    assert returned.wait(600)
    stragglers = [t for t in threading.enumerate() if t.name == "reward-call"]
    for thread in stragglers:
        thread.join(600)
    assert isinstance(results[1], TimeoutError)
