"""In-flight work that reads a component's memory outside its declared operation.

Example: an async checkpoint save returns from ``save()`` while a background thread still
stages the tensors to host. The save takes a hold *before* returning and the staging thread
releases it when the last tensor is copied; ``sleep()`` waits until no hold is left, so the
memory is never released under a reader::

    hold = trainer.residency.hold("async checkpoint staging")   # in the calling thread
    threading.Thread(target=stage_then_write, args=(hold,)).start()
    ...
    def stage_then_write(hold):
        with hold:               # releases the hold when staging ends, also on error
            host_state = stage(state_dict)
        write(host_state)        # the component may sleep now
"""

from __future__ import annotations

import threading
import time

from heron.residency.errors import ResidencyError


class Hold:
    """One registered reader of a component's memory; release exactly once (or use ``with``)."""

    def __init__(self, tracker: "InFlight", reason: str):
        self._tracker = tracker
        self.reason = reason
        self._released = False

    def release(self) -> None:
        self._tracker._release(self)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class InFlight:
    """Counts live holds; ``wait_idle`` blocks until none is left or the deadline passes."""

    def __init__(self, component: str):
        self.component = component
        self._holds: list[Hold] = []
        self._idle = threading.Condition()

    def hold(self, reason: str) -> Hold:
        hold = Hold(self, reason)
        with self._idle:
            self._holds.append(hold)
        return hold

    def _release(self, hold: Hold) -> None:
        with self._idle:
            if hold._released:
                return  # idempotent: `with hold:` after an explicit release is fine
            hold._released = True
            self._holds.remove(hold)
            self._idle.notify_all()

    def reasons(self) -> list[str]:
        with self._idle:
            return [h.reason for h in self._holds]

    def wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._holds:
                left = deadline - time.monotonic()
                if left <= 0:
                    reasons = ", ".join(h.reason for h in self._holds)
                    raise ResidencyError(
                        f"{self.component}: cannot sleep, in-flight work still reads its memory after "
                        f"{timeout_s:.0f} s ({reasons}); release its hold or raise offload.wait_timeout_s"
                    )
                self._idle.wait(left)
