"""The folders a run writes into: one run per folder, and what a new run does with the logs an
earlier one left there.

- ``hold_run_folders(cfg)``: ``heron train`` locks ``run.dir`` and, when it lies elsewhere,
  ``checkpoint.dir`` (two runs with different run.dirs must not share checkpoints either), before
  anything is loaded. A second run on a folder in use fails at once naming the holder; a killed
  holder's lock is gone with its process (``heron.folder_lock``).
- ``hold_sft_output(path)``: ``heron sft`` locks its output folder (a lock file next to it, as the
  folder itself must not exist until the model in it is complete).
- ``set_aside_earlier_logs``: a fresh start (no checkpoint resumed) never appends to logs of an
  earlier attempt. Those of the same run (a crash before its first checkpoint, or
  ``checkpoint.load=none``) are renamed ``<name>.old-<time>``, never deleted; those of another
  run (its config.yaml differs in what resume compares) stop the run with one line.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path

from heron.folder_lock import FolderLock
from heron.errors import UserError

log = logging.getLogger("heron.run_dir")
EARLIER_LOGS = ("metrics.jsonl", "eval.jsonl", "config.yaml", "reward_curve.png", "tb", "trackers.json")
RECORDS = ("metrics.jsonl", "eval.jsonl")


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def hold_run_folders(cfg) -> ExitStack:
    """Locks run.dir (and checkpoint.dir outside it); closing the returned stack releases them."""
    run_dir = Path(cfg.run.dir)
    checkpoints = Path(cfg.checkpoint.folder(cfg.run.dir))
    held = ExitStack()
    try:
        held.enter_context(FolderLock(run_dir, "run.dir"))
        if cfg.checkpoint.enabled and not _inside(checkpoints, run_dir):
            held.enter_context(FolderLock(checkpoints, "checkpoint.dir"))
    except BaseException:
        held.close()
        raise
    return held


def hold_sft_output(out: Path) -> FolderLock:
    """Locks the SFT output folder through ``.<name>.heron.lock`` beside it (removed when done)."""
    out = Path(out)
    return FolderLock(out, "sft.output", lock_path=out.parent / f".{out.name}.heron.lock")


def set_aside_earlier_logs(run_dir: Path, config_dict: dict) -> list[Path]:
    """Before a fresh start: renames the earlier attempt's logs if they are this run's, refuses
    them if they are another run's; returns the new names."""
    from heron.checkpoint.fingerprint import config_fingerprint

    run_dir = Path(run_dir)
    found = [name for name in RECORDS if (run_dir / name).is_file() and (run_dir / name).stat().st_size > 0]
    if not found:
        return []
    previous = _read_config(run_dir / "config.yaml")
    if previous is None or config_fingerprint(previous) != config_fingerprint(config_dict):
        raise UserError(
            f"run.dir {run_dir} already holds {found[0]} of another run and no checkpoint is being resumed; "
            f"choose a new run.dir, move the old files away, or resume that run (checkpoint.load=auto)"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = [_rename_aside(run_dir / name, stamp) for name in EARLIER_LOGS if (run_dir / name).exists()]
    log.warning("%s: no checkpoint to resume from, so the run starts at rollout 0; the earlier attempt's logs "
                "are kept as %s", run_dir, ", ".join(p.name for p in moved))
    return moved


def _read_config(path: Path) -> dict | None:
    import yaml

    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else None


def _rename_aside(path: Path, stamp: str) -> Path:
    target, n = path.with_name(f"{path.name}.old-{stamp}"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.old-{stamp}-{n}")
    path.rename(target)
    return target
