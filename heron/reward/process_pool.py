"""Sync reward calls in worker processes (``reward.processes``): CPU-bound rewards in parallel
across cores, which threads cannot give under the GIL (the built-in math reward took 2-17 ms a
call on this project's CPU, depending on the answer; bench/reward_calls.py: 1.74x on 2 cores).

Each worker is a child process that builds ``reward.fn`` itself from the config (a built-in, a
hook path or ``remote``: heron.reward.reward_fn) and runs one call at a time; the
arguments and results travel pickled through a pipe. A call past ``reward.timeout_s`` is killed
with its worker (unlike a thread, a process can be), a call whose worker dies (a crash in a C
extension) fails the same way, and a fresh worker takes the place of either. An exception comes
back as its type name and message (the hook's own class may not import in this process). Workers
ignore SIGINT: Ctrl-C reaches the whole process group, and the run's shutdown (heron.interrupt)
stops them through ``close``. They start on the first batch and serve every later one; a worker
whose parent is gone reads the end of its socket and exits.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Sequence

from heron.config.reward import RewardConfig
from heron.reward.deadline_pool import deadline_error


STARTUP_S = 120.0  # a worker that is not up by then is reported, not waited for (a loaded machine: seconds)


class RewardProcesses:
    """``count`` workers for ``cfg.fn``; ``run`` a batch of calls, ``close`` to stop them."""

    def __init__(self, cfg: RewardConfig, count: int):
        self.cfg, self.count = cfg, count
        self.workers: list[_Worker] = []

    def run(self, calls: Sequence[tuple], timeout: float | None) -> list[Any]:
        """``fn(*args)`` for each ``args`` of ``calls`` -> the results in order: the returned value,
        an exception for a call that raised, or a TimeoutError / ChildProcessError for one that ran
        past ``timeout`` seconds (None: no deadline) or lost its worker. Should this raise (Ctrl-C,
        a worker that cannot start), the workers holding a call are stopped, so no stale reply
        reaches a later batch."""
        self._start(min(self.count, len(calls)) - len(self.workers))
        results: list[Any] = [None] * len(calls)
        idle, busy = list(self.workers), {}  # busy: worker -> (call index, start)
        next_call = 0
        try:
            while next_call < len(calls) or busy:
                while idle and next_call < len(calls):
                    worker = idle.pop()
                    if not worker.send(calls[next_call]):  # it died while idle
                        worker = self._replace(worker)
                        worker.send(calls[next_call])
                    busy[worker] = (next_call, time.monotonic())
                    next_call += 1
                deadline = None if timeout is None else min(start for _, start in busy.values()) + timeout
                ready = set(wait([w.conn for w in busy], None if deadline is None else max(0.0, deadline - time.monotonic())))
                now = time.monotonic()
                for worker, (index, start) in list(busy.items()):
                    if worker.conn in ready:  # a reply, or the end of the socket: the worker died
                        results[index], alive = worker.receive()
                    elif timeout is not None and now - start >= timeout:
                        results[index], alive = deadline_error(timeout), False
                    else:
                        continue
                    del busy[worker]
                    idle.append(worker if alive else self._replace(worker))
        except BaseException:
            for worker in busy:
                worker.stop()
                self.workers.remove(worker)
            raise
        return results

    def _start(self, count: int) -> None:
        """``count`` more workers, started side by side; a call's deadline counts once its worker is up."""
        started = [_Worker(self.cfg) for _ in range(count)]
        try:
            for worker in started:
                worker.wait_ready()
        except BaseException:
            for worker in started:
                worker.stop()
            raise
        self.workers += started

    def _replace(self, worker: "_Worker") -> "_Worker":
        worker.stop()
        fresh = _Worker(self.cfg)
        fresh.wait_ready()
        self.workers[self.workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        """Stops every worker; idempotent. The next ``run`` starts fresh ones."""
        for worker in self.workers:
            worker.stop()
        self.workers = []


class _Worker:
    """One worker process (``python -m heron.reward.process_pool``) and the parent's end of a
    socket pair to it. Not ``multiprocessing``'s spawn: that re-imports the parent's ``__main__``
    in the child, which fails for ``python -c``, stdin and notebooks; this child imports heron only."""

    def __init__(self, cfg: RewardConfig):
        parent, child = socket.socketpair()
        with child:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "heron.reward.process_pool", str(child.fileno())],
                pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
            )
        self.conn = Connection(parent.detach())
        self.conn.send((cfg, list(sys.path)))

    def wait_ready(self) -> None:
        """Blocks until the worker has built the reward function (it imports heron: ~0.2 s, more
        on a loaded machine); raises when it exits instead or stays silent for STARTUP_S."""
        try:
            if self.conn.poll(STARTUP_S) and self.conn.recv() == ("ready",):
                return
        except (EOFError, OSError):
            pass
        self.stop()
        raise RuntimeError(f"reward.processes: a reward worker did not start within {STARTUP_S:g} s (exit code "
                           f"{self.process.returncode}; its error, if any, is above); set reward.processes=0 to "
                           "score in this process")

    def send(self, args: tuple) -> bool:
        """Whether the call reached the worker."""
        try:
            self.conn.send(args)
            return True
        except (BrokenPipeError, OSError):
            return False

    def receive(self) -> tuple[Any, bool]:
        """(the call's result, whether the worker is still alive to take another)."""
        try:
            reply = self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            return ChildProcessError(f"the reward worker died (exit code {code})"), False
        result = reply[1] if reply[0] == "ok" else type(reply[1], (Exception,), {})(reply[2])
        return result, self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)
        self.conn.close()


def _serve(conn: Connection) -> None:
    """A worker's loop: build the reward function, then answer calls until the socket closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cfg, path = conn.recv()
    sys.path[:] = path  # the parent's: a module:function hook imports as it did there
    from heron.reward.reward_fn import build_reward_fn

    try:
        fn, setup_error = build_reward_fn(cfg)[0], None
    except BaseException as e:  # noqa: BLE001 -- every call reports it
        fn, setup_error = None, e
    conn.send(("ready",))
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if setup_error is not None:
                raise setup_error
            reply = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 -- isolated per call, reported by the scorer
            reply = ("error", type(e).__name__, str(e))
        try:
            conn.send(reply)
        except Exception as e:  # noqa: BLE001 -- e.g. a return value that does not pickle
            conn.send(("error", type(e).__name__, f"the reward's value could not be sent back: {e}"))


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
