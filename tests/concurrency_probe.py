"""Counts calls in flight without relying on timing (tests/tolerance.py, rule 5).

``with probe:`` around the body of each call. A call that enters waits until ``expected``
calls are in flight at once (or every call has started, so no more can come), then holds a
moment and leaves. So a limit that lets ``expected`` calls run together is reached on any
machine however loaded, and a limit above ``expected`` shows as ``max_in_flight >
expected``: while the first ``expected`` calls are in flight, an extra one has every chance
to start. A limit below ``expected`` leaves the calls waiting: ``deadline_s`` turns that into
a failure (``timed_out``) instead of a hang.
"""

from __future__ import annotations

import threading
import time


class ConcurrencyProbe:
    def __init__(self, expected: int, total: int, *, hold_s: float = 0.05, deadline_s: float = 30.0):
        self.expected, self.total = expected, total
        self.hold_s, self.deadline_s = hold_s, deadline_s
        self.started = self.in_flight = self.max_in_flight = 0
        self.timed_out = False
        self._cond = threading.Condition()

    def __enter__(self):
        with self._cond:
            self.started += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._cond.notify_all()
            reached = self._cond.wait_for(lambda: self.in_flight >= self.expected or self.started >= self.total, self.deadline_s)
            self.timed_out |= not reached
        time.sleep(self.hold_s)  # gives a call beyond the limit its chance to start; never needed to pass
        return self

    def __exit__(self, *exc):
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()
        return False
