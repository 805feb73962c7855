"""Weights & Biases (``tracking.wandb``): the run config at init, one history row per rollout
and per eval with ``rollout_id`` as the x-axis (``define_metric``; the first eval is at -1), and
the reward curve as a ``plot`` artifact at the end.

Files go under run.dir/wandb (offline: all of it, for ``wandb sync``). A resumed run reopens the
same W&B run (its id from run.dir/trackers.json, ``resume="allow"``). Waiting is bounded:
``init_timeout`` for the start, ``finish_timeout`` for the upload at the end (what is left
stays on disk for ``wandb sync``); a history row is handed to wandb's own process and never
waits on the network.

``run.finish()`` returns before wandb's process has written the run's file: it closes the file
later, on its own (measured: under load, a file read right after ``finish()`` held its 7-byte
header only, 3 times in 40). ``close`` therefore also stops that process when no other W&B run
of this process is active, so the run's files are complete on disk when heron's run ends."""

from __future__ import annotations

from pathlib import Path

from heron.config.tracking import WandbConfig
from heron.tracking.delivery import TrackerRun

FINISH_TIMEOUT_S = 30.0


class WandbBackend:
    def __init__(self, cfg: WandbConfig, run_dir: Path, run_config: dict, previous: TrackerRun | None):
        import wandb

        settings = wandb.Settings(
            init_timeout=cfg.init_timeout_s, finish_timeout=FINISH_TIMEOUT_S, console="off", silent=True,
            x_disable_stats=True, disable_git=True, save_code=False, x_save_requirements=False,
        )
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity or None, name=cfg.name or Path(run_dir).resolve().name,
            group=cfg.group or None, tags=list(cfg.tags) or None, mode=cfg.mode, dir=str(run_dir),
            config=run_config if previous is None else None,  # once: a resumed W&B run has it already
            id=previous.run_id if previous else None, resume="allow", settings=settings,
            reinit="create_new",  # heron's own run, never a user's run that is active in this process
        )
        self.run_id = self.run.id
        self.run.define_metric("rollout_id")
        self.run.define_metric("*", step_metric="rollout_id")

    def log_metrics(self, kind: str, rollout_id: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, "rollout_id": rollout_id})

    def log_file(self, path: Path) -> None:
        import wandb

        artifact = wandb.Artifact(Path(path).stem, type="plot")
        artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def close(self, failed: bool) -> None:
        import wandb
        from wandb.sdk import wandb_setup

        self.run.finish(exit_code=1 if failed else 0)
        if wandb_setup.singleton().most_recent_active_run is None:  # a user's own run keeps the service
            try:
                wandb.teardown()  # waits for wandb's process to write and close the run's file
            except SystemExit as e:  # teardown exits the process when wandb's process failed
                raise RuntimeError(f"wandb's process exited with {e.code}") from None
