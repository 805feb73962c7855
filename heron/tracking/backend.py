"""The optional trackers beside metrics.jsonl (TensorBoard, W&B, MLflow) behind one small
protocol, each wrapped so that it can never stop a run.

A tracker is a mirror: metrics.jsonl and eval.jsonl are the run's record and are written first,
always. A tracker that fails (no credentials, an unreachable server, a full disk under its own
files) logs one warning line and is off for the rest of the run; nothing it raises reaches the
loop. Calls that wait on a server are bounded by the tracker's own timeouts (``tracking.*``), and
closing one is bounded by ``CLOSE_DEADLINE_S`` (a thread that is abandoned if it takes longer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

log = logging.getLogger("heron.tracking")
CLOSE_DEADLINE_S = 60.0  # a tracker still flushing to a server after this is left behind (its files remain)


class TrackerBackend(Protocol):
    """One tracker. ``kind`` is ``"metrics"`` (one record per rollout) or ``"eval"`` (one per eval,
    every eval set in it); ``rollout_id`` is the x-axis (-1: the eval before the first rollout)."""

    run_id: str  # the tracker's own id of this run (W&B run id, MLflow run id), kept for resume

    def log_metrics(self, kind: str, rollout_id: int, metrics: dict[str, float]) -> None: ...

    def log_file(self, path: Path) -> None: ...  # the reward curve, as an artifact

    def close(self, failed: bool) -> None: ...


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


class GuardedBackend:
    """A backend whose first failure warns once (naming ``key`` and what failed) and turns it off."""

    def __init__(self, key: str, start: Callable[[], TrackerBackend]):
        self.key = key  # the config key that enabled it: "tracking.wandb"
        self.backend: TrackerBackend | None = None
        try:
            self.backend = start()
        except Exception as e:
            self._fail("could not start", e)

    @property
    def active(self) -> bool:
        return self.backend is not None

    def call(self, what: str, method: str, *args) -> bool:
        """``backend.<method>(*args)``; False (and the backend off) if it raised."""
        if self.backend is None:
            return False
        try:
            getattr(self.backend, method)(*args)
            return True
        except Exception as e:
            self._fail(what, e)
            return False

    def close(self, failed: bool) -> None:
        if self.backend is None:
            return
        backend, self.backend = self.backend, None
        errors: list[BaseException] = []

        def finish() -> None:
            try:
                backend.close(failed)
            except Exception as e:
                errors.append(e)

        thread = threading.Thread(target=finish, name=f"close {self.key}", daemon=True)
        thread.start()
        thread.join(CLOSE_DEADLINE_S)
        if thread.is_alive():
            log.warning("%s did not close within %.0f s (a server that does not answer?); left behind", self.key, CLOSE_DEADLINE_S)
        elif errors:
            log.warning("%s failed to close (%s)", self.key, one_line(errors[0]))

    def _fail(self, what: str, error: BaseException) -> None:
        log.warning("%s %s (%s); it is off for the rest of the run, metrics.jsonl is still written", self.key, what, one_line(error))
        backend, self.backend = self.backend, None
        if backend is not None:
            try:
                backend.close(True)
            except Exception:
                pass  # already reported the first failure
