"""The optional trackers of a run (TensorBoard, W&B, MLflow), opened from ``tracking.*`` and
fed by ``Tracker`` after metrics.jsonl / eval.jsonl have their record. Each is guarded (a failure
warns once and turns it off: heron.tracking.backend) and W&B and MLflow skip what they already
hold on resume (heron.tracking.delivery)."""

from __future__ import annotations

from pathlib import Path

from heron.config.tracking import TrackingConfig
from heron.tracking.backend import GuardedBackend
from heron.tracking.delivery import DeliveryState


class Backends:
    def __init__(self, cfg: TrackingConfig, run_dir: Path, run_config: dict, first_rollout: int):
        self.state = DeliveryState(run_dir, resumed=first_rollout > 0)
        self.guarded: list[GuardedBackend] = []
        self.resumable: set[str] = set()  # the keys whose deliveries are kept in trackers.json
        if cfg.tensorboard:
            from heron.tracking.tensorboard_backend import TensorBoardBackend

            self.guarded.append(GuardedBackend("tracking.tensorboard", lambda: TensorBoardBackend(run_dir, first_rollout)))
        if cfg.wandb.enabled:
            from heron.tracking.wandb_backend import WandbBackend

            previous = self.state.previous("tracking.wandb")
            self._add_resumable("tracking.wandb", lambda: WandbBackend(cfg.wandb, run_dir, run_config, previous))
        if cfg.mlflow.enabled:
            from heron.tracking.mlflow_backend import MlflowBackend

            previous = self.state.previous("tracking.mlflow")
            self._add_resumable("tracking.mlflow", lambda: MlflowBackend(cfg.mlflow, run_dir, run_config, previous))

    def _add_resumable(self, key: str, start) -> None:
        guarded = GuardedBackend(key, start)
        if guarded.active:
            self.state.started(key, guarded.backend.run_id)
            self.resumable.add(key)
        self.guarded.append(guarded)

    def log(self, kind: str, rollout_id: int, record: dict) -> None:
        """The numeric entries of ``record`` (bools and ``rollout_id`` left out) to every tracker
        that does not hold this rollout's ``kind`` yet."""
        metrics = {k: float(v) for k, v in record.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "rollout_id"}
        for guarded in self.guarded:
            resumable = guarded.key in self.resumable
            if resumable and self.state.runs[guarded.key].sent(kind, rollout_id):
                continue
            if guarded.call(f"could not log the {kind} of rollout {rollout_id}", "log_metrics", kind, rollout_id, metrics) and resumable:
                self.state.mark(guarded.key, kind, rollout_id)

    def log_file(self, path: Path) -> None:
        for guarded in self.guarded:
            guarded.call(f"could not upload {Path(path).name}", "log_file", Path(path))

    def close(self, failed: bool) -> None:
        for guarded in self.guarded:
            guarded.close(failed)
