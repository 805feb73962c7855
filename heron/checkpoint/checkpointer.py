"""The run's checkpoint policy: when to save (``checkpoint.interval``, always after the last
rollout), what goes into the run state, and resume at start-up. ``RLRun`` holds one."""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path

from heron.checkpoint.layout import IN_FLIGHT_FILE
from heron.checkpoint.reader import Checkpoint
from heron.checkpoint.resume import (
    restore, select_checkpoint, set_aside_newer, truncate_run_files,
)
from heron.checkpoint.rng import capture_rng
from heron.checkpoint.save_failure import out_of_space
from heron.checkpoint.run_state import Fingerprint, RunState
from heron.checkpoint.shards import SavedShards
from heron.checkpoint.fingerprint import RESUME_CRITICAL, config_fingerprint, digest
from heron.checkpoint.writer import CheckpointWriter
from heron.config.base import to_dict
from heron.run_dir import set_aside_earlier_logs

log = logging.getLogger("heron.checkpoint")


class Checkpointer:
    def __init__(self, cfg, run_dir: Path):
        self.cfg = cfg  # the whole HeronConfig: its resume-critical parts go into every checkpoint
        self.run_dir = Path(run_dir)
        self.folder = Path(cfg.checkpoint.folder(str(run_dir)))
        self.writer: CheckpointWriter | None = None
        self.resumed_from: Checkpoint | None = None

    def resume(self, components) -> int:
        """Restores the run from ``checkpoint.load``; returns the first rollout id to run (0 if fresh)."""
        checkpoint = select_checkpoint(self.cfg.checkpoint, self.folder)
        if checkpoint is None:
            set_aside_earlier_logs(self.run_dir, to_dict(self.cfg))  # a fresh start appends to nothing
            return 0
        start = restore(checkpoint, components, to_dict(self.cfg))  # raises before loading if it does not fit
        if self.cfg.checkpoint.load != "auto":
            set_aside_newer(self.folder, checkpoint.rollout_id)
        truncate_run_files(self.run_dir, checkpoint.rollout_id)
        self.resumed_from = checkpoint
        if start >= self.cfg.rollout.num_rollouts:
            log.warning("resumed from %s: all %d rollouts are done", checkpoint.path, self.cfg.rollout.num_rollouts)
        else:
            log.warning("resumed from %s: continuing at rollout %d", checkpoint.path, start)
        return start

    def due(self, rollout_id: int) -> bool:
        ckpt = self.cfg.checkpoint
        last = rollout_id == self.cfg.rollout.num_rollouts - 1
        return ckpt.enabled and (last or (ckpt.interval > 0 and (rollout_id + 1) % ckpt.interval == 0))

    def maybe_save(self, rollout_id: int, components) -> bool:
        """Saves after ``rollout_id`` if due; always surfaces a failed background save."""
        if self.writer is not None:
            self.writer.check()
        if not self.due(rollout_id):
            return False
        self._writer(components).save(rollout_id, components.checkpoint_source(), partial(self.run_state, rollout_id, components),
                                      files=in_flight_file(components.generator))
        return True

    def run_state(self, rollout_id: int, components, shards: SavedShards) -> dict:
        """``state.json``: the typed ``RunState`` of the run after ``rollout_id``."""
        config = to_dict(self.cfg)
        fingerprint = config_fingerprint(config)
        return RunState(
            rollout_id=rollout_id,
            policy_version=shards.trainer.version,
            run_seed=self.cfg.run.seed,
            sampler=components.sampler.state_dict(),
            rng=capture_rng(),
            config=config,
            config_digest=digest(fingerprint),
            config_digest_covers=list(RESUME_CRITICAL),
            trainer=shards.trainer,
            fingerprint=Fingerprint(config=fingerprint, model=shards.model, optimizer=shards.optimizer),
        ).to_json()

    def _writer(self, components) -> CheckpointWriter:
        if self.writer is None:
            ckpt = self.cfg.checkpoint
            self.writer = CheckpointWriter(
                self.folder, async_save=ckpt.async_, keep_last=ckpt.keep_last,
                hf_export=ckpt.hf_export, tokenizer=components.tokenizer,
            )
        return self.writer

    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint this run committed, else the one it resumed from, else None."""
        if self.writer is not None and self.writer.last_committed is not None:
            return self.writer.last_committed
        return self.resumed_from.path if self.resumed_from is not None else None

    def close(self, failure: BaseException | None = None) -> None:
        """End of run: waits for the save in flight and raises its error. While the run is
        already failing (``failure``), the first error is the one reported and the save's is
        logged -- except when both are the disk filling up: an async save fills it while the
        loop goes on, so the loop's next write (a metrics record) can fail first, in the moment
        before the save fails and removes its files. The save is then the cause, and its error
        is the one that names the checkpoint lost, the last complete one and the fix."""
        if self.writer is None:
            return
        try:
            self.writer.close()
        except Exception as e:
            if failure is None or (out_of_space(failure) and out_of_space(e)):
                if failure is not None:
                    log.warning("also, the run stopped on: %s", failure)
                raise
            log.warning("also, the last checkpoint save failed: %s", e)


def in_flight_file(generator) -> dict[str, bytes]:
    """loop.mode=async: the next rollout, already generated (it waited for nothing more: the push
    before this save queued behind it), so that a resume trains the same samples
    (heron.rollout.async_generator); nothing in a sync run. A rollout that is not JSON (a custom
    data source's prompt metadata) is left out with a warning rather than failing the save."""
    batch = generator.in_flight()
    if batch is None:
        return {}
    try:
        return {IN_FLIGHT_FILE: json.dumps(batch.to_json(), separators=(",", ":"), allow_nan=True).encode()}
    except (TypeError, ValueError) as e:
        log.warning("rollout %d, generated ahead, is not saved with this checkpoint (%s); a resume from it generates "
                    "that rollout again", batch.rollout_id, e)
        return {}
