"""What each external tracker (W&B, MLflow) has been sent, kept in ``run.dir/trackers.json``, so
that a resumed run continues the same tracker run and sends no rollout twice.

A resume from the checkpoint of rollout k redoes rollouts k+1.. (identically: resume is exact),
but a crashed attempt may already have sent some of them. Trackers cannot take records back
(W&B steps only go forward; an MLflow metric keeps every value logged at a step), so heron
sends each tracker only records past the last it acknowledged (``last[kind]``): the values it
already holds for the redone rollouts are the ones the redo computes again. TensorBoard needs no
state here: its event files are purged from the resumed rollout on (``purge_step``).

A fresh start (rollout 0) ignores the file: the earlier attempt's logs, this file included, are
set aside (heron.run_dir) and the trackers start new runs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from heron.atomic_file import write_atomically

log = logging.getLogger("heron.tracking")
STATE_FILE = "trackers.json"
NOTHING = -2  # below every rollout_id (the first eval is at -1)


@dataclass
class TrackerRun:
    run_id: str
    last: dict[str, int] = field(default_factory=dict)  # kind ("metrics", "eval") -> last rollout_id sent

    def sent(self, kind: str, rollout_id: int) -> bool:
        return rollout_id <= self.last.get(kind, NOTHING)


class DeliveryState:
    def __init__(self, run_dir: Path, resumed: bool):
        self.path = Path(run_dir) / STATE_FILE
        self.runs: dict[str, TrackerRun] = self._read() if resumed else {}

    def _read(self) -> dict[str, TrackerRun]:
        try:
            data = json.loads(self.path.read_text())
            return {key: TrackerRun(str(v["run_id"]), {k: int(r) for k, r in v["last"].items()}) for key, v in data.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s is unreadable (%s): the trackers start new runs", self.path, e)
            return {}

    def previous(self, key: str) -> TrackerRun | None:
        return self.runs.get(key)

    def started(self, key: str, run_id: str) -> None:
        previous = self.runs.get(key)
        self.runs[key] = previous if previous is not None and previous.run_id == run_id else TrackerRun(run_id)
        self._write()

    def mark(self, key: str, kind: str, rollout_id: int) -> None:
        self.runs[key].last[kind] = rollout_id
        self._write()

    def _write(self) -> None:
        write_atomically(self.path, json.dumps({k: asdict(v) for k, v in self.runs.items()}, sort_keys=True).encode())
