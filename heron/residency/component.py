"""``Resident``: the mixin that gives a component ``sleep``/``wake`` and its memory report.

The component's own code stays free of device logic: it declares its public operations
(``heron.residency.declare``) and inherits this mixin; ``heron.residency.wiring`` attaches a
``Residency`` (state machine + backend) from outside. Without one attached, declared
operations run directly and ``sleep``/``wake`` raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from heron.residency.declare import host_only, lifecycle
from heron.residency.errors import ResidencyError
from heron.residency.in_flight import Hold
from heron.residency.state import Residency, State


class Resident:
    residency: Residency | None = None

    def _attached(self, operation: str) -> Residency:
        if self.residency is None:
            raise ResidencyError(
                f"{type(self).__name__}.{operation}: no residency attached; build it with "
                f"heron.residency.wiring.attach_residency(...)"
            )
        return self.residency

    @contextmanager
    def _hold_while_read(self, reason: str, needed: bool = True) -> Iterator[Callable[[], None] | None]:
        """For work that reads this component's memory after the operation returns (an async
        checkpoint's copy): yields the release of a hold that ``sleep`` waits for, to be called
        when the work is done; None when not ``needed`` or without a residency (nothing sleeps).
        An error before the work took it over releases the hold."""
        hold: Hold | None = self.residency.hold(reason) if needed and self.residency is not None else None
        try:
            yield None if hold is None else hold.release
        except BaseException:
            if hold is not None:
                hold.release()  # idempotent: also fine when the work released it already
            raise

    @lifecycle
    def sleep(self) -> None:
        """Releases device memory (contents kept on host). Idempotent."""
        self._attached("sleep").sleep()

    @lifecycle
    def wake(self) -> None:
        """Restores device memory bit-exactly into the same tensors. Idempotent."""
        self._attached("wake").wake()

    @property
    @host_only
    def residency_state(self) -> State:
        return self._attached("residency_state").state

    @host_only
    def memory_report(self) -> dict[str, int]:
        """Device bytes held now, per state category."""
        return self._attached("memory_report").memory_report()
