"""Interrupting a run: Ctrl-C (SIGINT) and SIGTERM end it cleanly, with one line.

- SIGINT raises ``KeyboardInterrupt`` (Python's default); SIGTERM raises ``Terminated``, a
  ``KeyboardInterrupt`` too, from heron's handler (Python's default kills the process without
  any clean-up; the one ``ray.init`` installs kills Ray's processes under the running run and
  exits with a core dump). Being ``BaseException``\\s, no ``except Exception`` swallows them.
- The handlers also record the signal: a signal that arrives while the main thread waits in
  Ray's C++ core (``ray.get``) is turned by Ray into a *new*, plain ``KeyboardInterrupt``, so
  the exception alone cannot tell SIGTERM from Ctrl-C; the record can.
- The run's exit path (``RLRun.__exit__``) then waits for the checkpoint in flight, closes the
  logs, stops actors and Ray -- with further SIGINT/SIGTERM held back until that is done, so
  nothing is left running -- and raises ``RunInterrupted`` with the rollout in progress and
  the last committed checkpoint.
- The CLI prints ``heron: interrupted at rollout N; last checkpoint <path|none>; rerun the same
  command to resume`` and exits 128 + the signal number (130, 143), as a shell does.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by ``install_interrupt_handlers``'s handler."""


class RunInterrupted(KeyboardInterrupt):
    """A run ended by a signal after its clean-up; the message is the CLI's whole output."""

    def __init__(self, signum: int, rollout_id: int | None, last_checkpoint: Path | None):
        super().__init__(signum, rollout_id, last_checkpoint)
        self.signum = signum
        self.rollout_id = rollout_id
        self.last_checkpoint = last_checkpoint

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        where = "at start-up" if self.rollout_id is None else f"at rollout {self.rollout_id}"
        return (f"interrupted {where}; last checkpoint {self.last_checkpoint or 'none'}; "
                f"rerun the same command to resume")


_last_signal: list[int] = []  # the newest SIGINT/SIGTERM seen by the handlers below


def install_interrupt_handlers() -> None:
    """SIGTERM raises ``Terminated`` in the main thread (signals are only delivered there);
    SIGINT keeps Python's behaviour where nobody replaced it. Both record their signal."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_keyboard_interrupt)


def _raise_terminated(signum, frame) -> None:
    _last_signal[:] = [signal.SIGTERM]
    raise Terminated()


def _raise_keyboard_interrupt(signum, frame) -> None:
    _last_signal[:] = [signal.SIGINT]
    raise KeyboardInterrupt()


def interrupt_signal(error: BaseException | None) -> int | None:
    """The signal behind ``error`` if it is an interruption (SIGINT or SIGTERM), else None. A
    plain ``KeyboardInterrupt`` may be Ray's re-raise of either: the handlers' record decides."""
    if isinstance(error, RunInterrupted):
        return error.signum
    if isinstance(error, Terminated):
        return signal.SIGTERM
    if isinstance(error, KeyboardInterrupt):
        return _last_signal[0] if _last_signal else signal.SIGINT
    return None


@contextmanager
def signals_held() -> Iterator[list[int]]:
    """While clean-up runs, SIGINT/SIGTERM are recorded (in the yielded list), not raised:
    a second Ctrl-C must not abandon actors or a checkpoint half-way. Outside the main
    thread (where handlers cannot be set) it records nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
