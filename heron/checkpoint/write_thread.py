"""Background checkpoint writes run in a thread that ends with the write.

Why not a long-lived worker (a ``ThreadPoolExecutor``): the write runs torch ops (the finite
check's reductions, DCP's copies), and every thread that has run an OpenMP-parallel op keeps
its own OpenMP team for as long as it lives. Once a process has more OpenMP threads than cores,
libgomp stops spinning between parallel regions and puts idle workers to sleep, so every later
parallel op of the training and decode threads pays a wake-up. Measured on this 2-core machine
(``bench/async_save_threads.py``): after the first async save through a long-lived worker, the
embedded engine decoded 1.6-1.9x slower for the rest of the run, the same slowdown as
``OMP_WAIT_POLICY=passive`` gives without any save. A thread that ends takes its team with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def start_write(job: Callable[[], T], name: str) -> Future:
    """Runs ``job`` in a new thread named ``name`` that exits when it is done -> its Future (the
    job's result or exception). Non-daemon, like an executor's worker: a pending write finishes
    before the interpreter exits."""
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(job())
        except BaseException as error:  # noqa: BLE001 -- handed to whoever waits on the future
            future.set_exception(error)

    threading.Thread(target=run, name=name).start()
    return future
