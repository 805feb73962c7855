"""torch.profiler over whole rollouts (``tracking.profile``).

Why whole rollouts: a rollout's time goes to several stages (generation, reward, the train step,
the weight push, eval, checkpoint), and which one to speed up is the first question; a trace of
one stage alone cannot answer it. Each stage the run times (``RLRun._timed``) is also a
``heron.<stage>`` range (``stage``), so the trace shows the stages on a timeline with the
operators inside them.

Each rollout in ``tracking.profile.rollouts`` writes, under run.dir/profile/rollout_<id>/:

- ``trace.json``: this process's Chrome trace (Perfetto, chrome://tracing);
- ``ops.txt``: its operators by self time (host time; and device time where there is a device);
- with ``cluster.backend=ray``, ``<actor>.trace.json`` and ``<actor>.ops.txt`` of every actor
  (``engine-0``, ``trainer-rank-0``, ...): each actor profiles itself over the same window
  (``Executor.start_profiles``) and sends its files back through Ray, so no shared filesystem is
  assumed.

Every file appears whole or not at all (heron.atomic_file). A rollout that fails stops the
profilers and writes nothing.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from heron.atomic_file import write_atomically
from heron.config.tracking import ProfileConfig
from heron.device import profiler_activities

if TYPE_CHECKING:
    from heron.cluster.executor import Executor

log = logging.getLogger("heron.tracking")
TABLE_ROWS = 50  # operators per table in ops.txt

ProfileFiles = tuple[str, str]  # one process's profile: (Chrome trace JSON text, operator tables)


def stage(name: str):
    """The range ``heron.<name>`` in a profile's trace (nearly free while no profiler runs)."""
    return torch.profiler.record_function(f"heron.{name}")


def rollout_folder(run_dir: Path, rollout_id: int) -> Path:
    return run_dir / "profile" / f"rollout_{rollout_id:05d}"


class Capture:
    """torch.profiler running in this process from construction to ``finish`` (the window may
    span several calls, as an actor's does)."""

    def __init__(self, cfg: ProfileConfig):
        self.activities = profiler_activities()
        self.by_shape = cfg.record_shapes
        self.profile = torch.profiler.profile(activities=self.activities, record_shapes=cfg.record_shapes,
                                              profile_memory=cfg.profile_memory, with_stack=cfg.with_stack)
        self.profile.start()

    def stop(self) -> None:
        self.profile.stop()

    def finish(self) -> ProfileFiles:
        """Stops the profiler -> (trace JSON text, operator tables)."""
        self.stop()
        with tempfile.TemporaryDirectory(prefix="heron-profile-") as tmp:
            path = Path(tmp) / "trace.json"
            self.profile.export_chrome_trace(str(path))
            trace = path.read_text()
        return trace, _tables(self.profile, len(self.activities) > 1, self.by_shape)


class RolloutProfiler:
    """Profiles the rollouts ``cfg.rollouts`` names, each in its own window (``rollout``): this
    process, and the executor's actors where it has any."""

    def __init__(self, cfg: ProfileConfig, run_dir: Path, executor: "Executor", notify: Callable[[str], None] = print):
        self.cfg = cfg
        self.run_dir = run_dir
        self.executor = executor
        self.notify = notify  # where the line naming each profile's folder goes (the run's console)

    def rollout(self, rollout_id: int):
        """The context of one rollout's stages: a profiler window when ``rollout_id`` is named."""
        return self._profiled(rollout_id) if rollout_id in self.cfg.rollouts else nullcontext()

    @contextmanager
    def _profiled(self, rollout_id: int) -> Iterator[None]:
        self.executor.start_profiles(self.cfg)
        capture = Capture(self.cfg)
        try:
            yield
        except BaseException:
            capture.stop()
            self._stop_actors_quietly()
            raise
        files = {"": capture.finish(), **self.executor.stop_profiles()}
        folder = rollout_folder(self.run_dir, rollout_id)
        folder.mkdir(parents=True, exist_ok=True)
        for name, (trace, table) in files.items():
            prefix = f"{name}." if name else ""
            write_atomically(folder / f"{prefix}trace.json", trace.encode())
            write_atomically(folder / f"{prefix}ops.txt", table.encode())
        self.notify(f"profile of rollout {rollout_id}: {folder} (trace.json: open in Perfetto or chrome://tracing; ops.txt)")


    def _stop_actors_quietly(self) -> None:
        """The actors' profilers stop too when the rollout failed, their files dropped; an actor
        that cannot answer (often the failure itself) must not hide the rollout's error."""
        try:
            self.executor.stop_profiles()
        except Exception as error:
            log.warning("profile of a failed rollout: the actors' profilers did not stop (%s)", error)


def _tables(profile: torch.profiler.profile, device: bool, by_shape: bool) -> str:
    """The operators by self host time, and by self device time when the device was recorded."""
    averages = profile.key_averages(group_by_input_shape=by_shape)
    sorts = ["self_cpu_time_total"] + (["self_device_time_total"] if device else [])
    return "\n\n".join(f"operators by {key}\n{averages.table(sort_by=key, row_limit=TABLE_ROWS)}" for key in sorts) + "\n"
