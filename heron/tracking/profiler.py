"""torch.profiler over whole rollouts (``tracking.profile``).

Why whole rollouts: a rollout's time goes to several stages (generation, reward, the train step,
the weight push, eval, checkpoint), and which one to speed up is the first question; a trace of
one stage alone cannot answer it. Each stage the run times (``RLRun._timed``) is also a
``heron.<stage>`` range (``stage``), so the trace shows the stages on a timeline with the
operators inside them.

Each rollout in ``tracking.profile.rollouts`` writes, under run.dir/profile/rollout_<id>/:

- ``trace.json``: the Chrome trace (Perfetto, chrome://tracing);
- ``ops.txt``: the operators by self time (host time; and device time where there is a device).

Both appear whole or not at all (heron.atomic_file). A rollout that fails stops the profiler and
writes nothing. What is recorded is this process: with ``cluster.backend=ray`` the trainer and the
engines run in their own actors, so the trace shows the driver's calls into them (the stage ranges
and their wall time), not their operators.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from heron.atomic_file import atomic_path, write_atomically
from heron.config.tracking import ProfileConfig
from heron.device import profiler_activities

log = logging.getLogger("heron.tracking")
TABLE_ROWS = 50  # operators per table in ops.txt


def stage(name: str):
    """The range ``heron.<name>`` in a profile's trace (nearly free while no profiler runs)."""
    return torch.profiler.record_function(f"heron.{name}")


def rollout_folder(run_dir: Path, rollout_id: int) -> Path:
    return run_dir / "profile" / f"rollout_{rollout_id:05d}"


class RolloutProfiler:
    """Profiles the rollouts ``cfg.rollouts`` names, each in its own window (``rollout``)."""

    def __init__(self, cfg: ProfileConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir

    def rollout(self, rollout_id: int):
        """The context of one rollout's stages: a profiler window when ``rollout_id`` is named."""
        return self._profiled(rollout_id) if rollout_id in self.cfg.rollouts else nullcontext()

    @contextmanager
    def _profiled(self, rollout_id: int) -> Iterator[None]:
        activities = profiler_activities()
        with torch.profiler.profile(activities=activities, record_shapes=self.cfg.record_shapes,
                                    profile_memory=self.cfg.profile_memory, with_stack=self.cfg.with_stack) as profile:
            yield
        folder = rollout_folder(self.run_dir, rollout_id)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / "trace.json") as temp:
            profile.export_chrome_trace(str(temp))
        write_atomically(folder / "ops.txt", _tables(profile, len(activities) > 1, self.cfg.record_shapes).encode())
        log.info("profile of rollout %d: %s (trace.json: Perfetto or chrome://tracing; ops.txt)", rollout_id, folder)


def _tables(profile: torch.profiler.profile, device: bool, by_shape: bool) -> str:
    """The operators by self host time, and by self device time when the device was recorded."""
    averages = profile.key_averages(group_by_input_shape=by_shape)
    sorts = ["self_cpu_time_total"] + (["self_device_time_total"] if device else [])
    return "\n\n".join(f"operators by {key}\n{averages.table(sort_by=key, row_limit=TABLE_ROWS)}" for key in sorts) + "\n"
