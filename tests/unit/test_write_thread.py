"""Background checkpoint writes run in a thread that ends with the write
(heron.checkpoint.write_thread): a long-lived worker that had run the write's torch ops kept an
OpenMP team alive and slowed every later parallel op of the process (decoding 1.6-1.9x,
bench/async_save_threads.py)."""

import threading

import pytest

from heron.checkpoint.shards import ModuleShards, ShardRequest
from heron.checkpoint.write_thread import start_write
from tests.checkpoint_helpers import model_and_optimizer

JOIN_S = 60  # a thread that is done exits at once; this only bounds a failure


def test_the_future_carries_the_result_and_the_thread_ends():
    seen, before = [], set(threading.enumerate())
    future = start_write(lambda: seen.append(threading.current_thread().name) or 7, "heron-test-write")
    assert future.result() == 7 and seen == ["heron-test-write"]
    _join_new_threads(before)


def test_the_future_carries_the_error():
    def failing():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        start_write(failing, "heron-test-write").result()


def test_async_saves_leave_no_thread_behind(tmp_path):
    model, optimizer = model_and_optimizer()
    shards = ModuleShards(model, optimizer)
    before = set(threading.enumerate())
    for i in range(3):
        shards.save_state(ShardRequest(str(tmp_path / f"rollout-{i}"), async_save=True))
        assert shards.wait_saved()  # {path: checksum} of the files written
    _join_new_threads(before)


def _join_new_threads(before: set) -> None:
    new = [t for t in threading.enumerate() if t not in before]
    for thread in new:
        thread.join(JOIN_S)
    assert not [t.name for t in new if t.is_alive()]
