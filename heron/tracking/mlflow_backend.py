"""MLflow (``tracking.mlflow``) through ``MlflowClient``: the run config as params once (flat
``section.key`` names), the metrics of each rollout and each eval as one batch at step =
rollout_id (the first eval at -1), and the reward curve as an artifact at the end.

The store is ``tracking.mlflow.tracking_uri`` (a server, ``sqlite:///...``), else
MLFLOW_TRACKING_URI, else ``sqlite:///<run.dir>/mlflow.db`` with artifacts in
run.dir/mlartifacts. A resumed run continues the same MLflow run (its id from
run.dir/trackers.json). Requests to a server are bounded: MLflow reads its HTTP timeout and
retries only from the environment (MLFLOW_HTTP_REQUEST_TIMEOUT, _MAX_RETRIES), so they are set
from ``request_timeout_s`` and ``max_retries`` before the client is made.

MLflow metric names allow letters, digits, ``_ - . : /`` and spaces: any other character is
spelled out (``eval/pass@4`` -> ``eval/pass_at_4``) or replaced by ``_``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from heron.config.tracking import MlflowConfig
from heron.tracking.delivery import TrackerRun

_NOT_ALLOWED = re.compile(r"[^\w\-.: /]")
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def mlflow_name(key: str) -> str:
    return _NOT_ALLOWED.sub("_", key.replace("@", "_at_"))


def flat_params(config: dict, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``; lists and empty dicts as their repr."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[mlflow_name(name)] = str(value)[:MAX_PARAM_CHARS]
    return flat


class MlflowBackend:
    def __init__(self, cfg: MlflowConfig, run_dir: Path, run_config: dict, previous: TrackerRun | None):
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, round(cfg.request_timeout_s)))
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(cfg.max_retries)
        from mlflow import MlflowClient

        run_dir = Path(run_dir).resolve()
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=uri)
        if previous is not None:
            self.run_id = previous.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.client.get_experiment_by_name(cfg.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            default_store = not cfg.tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI")
            location = (run_dir / "mlartifacts").as_uri() if default_store else None
            experiment_id = self.client.create_experiment(cfg.experiment, artifact_location=location)
        run = self.client.create_run(experiment_id, run_name=cfg.run_name or run_dir.name)
        self.run_id = run.info.run_id
        self._log_params(flat_params(run_config))

    def _log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[start:start + 100])

    def log_metrics(self, kind: str, rollout_id: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_name(k), v, now, rollout_id) for k, v in metrics.items()])

    def log_file(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
