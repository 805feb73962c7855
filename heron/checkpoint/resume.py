"""Resume: pick the checkpoint (``checkpoint.load``), check that it fits, restore the run.

Order matters: every check runs before anything is loaded or any file is changed, so a
checkpoint that does not fit fails in one line with the run and its folders untouched. The
fit check reads the trainer's tensors, so it runs inside ``Trainer.load_state``
(an operation that declares it needs device memory), not from outside.

What is restored (and so what the resumed run continues with): model and AdamW state (DCP; and
the critic's, with algo.advantage=gae),
LR scheduler, policy version, data sampler (epoch, cursor), every RNG and, after an async
run's save, the rollout it had generated ahead. The engine then gets
the restored weights through the run's own ``push_weights`` (one push path). Sampling seeds need no
state: they derive from (run.seed, rollout_id, prompt_id, sample_index) and run.seed must match.
The run's metrics.jsonl / eval.jsonl / staleness.jsonl keep only rows up to the checkpoint's rollout: later rows
were produced after the checkpoint and are produced again, identically, by the resumed run.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.fingerprint import (
    check_config, check_model, check_optimizer, config_fingerprint, model_fingerprint, optimizer_fingerprint,
)
from heron.checkpoint.layout import IN_FLIGHT_FILE, committed, rollout_id_of
from heron.checkpoint.reader import Checkpoint, find_latest, open_checkpoint
from heron.checkpoint.rng import restore_rng
from heron.config.checkpoint import CheckpointConfig
from heron.records import RolloutBatch

log = logging.getLogger("heron.checkpoint")
RUN_FILES = ("metrics.jsonl", "eval.jsonl", "staleness.jsonl")


def select_checkpoint(cfg: CheckpointConfig, folder: Path) -> Checkpoint | None:
    """``auto``: newest complete checkpoint in ``folder`` (or None); ``none``: None; else the path."""
    if cfg.load == "none":
        return None
    if cfg.load == "auto":
        return find_latest(folder)
    return open_checkpoint(cfg.load)


def check_fits(checkpoint: Checkpoint, model, optimizer, config_dict: dict) -> None:
    """One-line ``CheckpointMismatchError`` if config, model shapes or optimizer structure differ."""
    from heron.checkpoint.dcp_io import live_state

    saved = checkpoint.state.get("fingerprint")
    if not isinstance(saved, dict) or not {"config", "model", "optimizer"} <= set(saved):
        raise CheckpointError(f"checkpoint {checkpoint.path} is corrupt: state.json has no fingerprint")
    live = live_state(model, optimizer)
    check_model(checkpoint.name, saved["model"], model_fingerprint(live["model"]))
    check_optimizer(checkpoint.name, saved["optimizer"], optimizer_fingerprint(optimizer, live["optimizer"]))
    check_config(checkpoint.name, saved["config"], config_fingerprint(config_dict))


def truncate_run_files(run_dir: Path, rollout_id: int) -> None:
    """Drops rows with ``rollout_id`` > the checkpoint's from metrics.jsonl and eval.jsonl
    (atomic rewrite); rows up to it are kept byte for byte. A torn last line (a crash mid-write)
    is dropped with a warning; a corrupt line in the middle stops the run (file:line)."""
    from heron.atomic_file import write_atomically
    from heron.tracking.metrics_file import parse_jsonl

    for name in RUN_FILES:
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = parse_jsonl(text, path)
        kept = [line.text for line in lines if line.record.get("rollout_id", -1) <= rollout_id]
        if "".join(kept) != text:
            write_atomically(path, "".join(kept).encode())
        if len(kept) != len(lines):
            log.warning("%s: dropped %d rows after rollout %d (made after the checkpoint; they are redone)",
                        path, len(lines) - len(kept), rollout_id)


def set_aside_newer(folder: Path, rollout_id: int) -> None:
    """After resuming from an older checkpoint by path, newer committed checkpoints in the run's
    folder belong to an abandoned timeline: rename them (never delete) so ``auto`` skips them."""
    for path in committed(folder):
        if rollout_id_of(path) > rollout_id:
            target = path.with_name(f"{path.name}.abandoned-{time.time_ns()}")
            path.rename(target)
            log.warning("moved %s to %s: newer than the checkpoint resumed from", path.name, target.name)


def restore(checkpoint: Checkpoint, components, run_config: dict) -> int:
    """Loads the checkpoint into the run's components (the trainer checks the fit first);
    returns the first rollout to run."""
    state = checkpoint.run_state()
    in_flight = read_in_flight(checkpoint)  # read before anything is loaded
    components.checkpoint_source().load_state(checkpoint, run_config)  # the trainer (and the critic)
    components.sampler.load_state_dict(state.sampler)
    restore_rng(state.rng)
    if in_flight is not None and not components.generator.resume_in_flight(in_flight):
        log.info("%s holds rollout %d as generated ahead by an async run; this run generates it again",
                 checkpoint.name, in_flight.rollout_id)
    return checkpoint.rollout_id + 1


def read_in_flight(checkpoint: Checkpoint) -> RolloutBatch | None:
    """loop.mode=async: the rollout the checkpoint holds as generated ahead, which the generator
    then returns next (heron.rollout.async_generator); None when it holds none."""
    path = checkpoint.path / IN_FLIGHT_FILE
    if not path.is_file():
        return None
    try:
        return RolloutBatch.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"checkpoint {checkpoint.path} is corrupt: {IN_FLIGHT_FILE} is not a rollout ({e})") from None
