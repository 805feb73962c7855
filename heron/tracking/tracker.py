"""One object the loop reports to: progress bar, one-line summaries, metrics.jsonl,
eval.jsonl, the optional trackers (TensorBoard, W&B, MLflow: heron.tracking.backends), and the
reward plot at the end. The JSONL files get each record first; a tracker only mirrors it."""

from __future__ import annotations

import logging
from pathlib import Path

from tqdm import tqdm

from heron.config.tracking import TrackingConfig
from heron.errors import RunError, describe_os_error
from heron.tracking.backends import Backends
from heron.tracking.metrics_file import JsonlWriter, read_jsonl
from heron.tracking.plot import plot_reward_curve

log = logging.getLogger("heron.tracking")


class Tracker:
    def __init__(self, cfg: TrackingConfig, run_dir: Path, first_rollout: int, num_rollouts: int,
                 run_config: dict | None = None):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.metrics = JsonlWriter(self.run_dir / "metrics.jsonl")
        self.evals = JsonlWriter(self.run_dir / "eval.jsonl")
        self.bar = tqdm(
            total=num_rollouts, initial=first_rollout, desc="rollouts", unit="rollout",
            disable=None if cfg.progress else True, dynamic_ncols=True,  # None: off when not a tty
        )
        self.backends = Backends(cfg, self.run_dir, run_config or {}, first_rollout)  # logs the config once

    def log_rollout(self, record: dict) -> None:
        self.metrics.write(record)
        # the record repeats this rollout's eval for the summary line: trackers got it from log_eval
        self.backends.log("metrics", record["rollout_id"], {k: v for k, v in record.items() if not k.startswith("eval/")})
        self.bar.set_postfix(reward=f"{record['reward/mean']:.3f}", s_per_rollout=f"{record['time/rollout_s']:.2f}")
        self.bar.update(1)
        if self.cfg.summary:
            self.print(summary_line(record))

    def log_eval(self, rollout_id: int, policy_version: int, metrics: dict[str, float]) -> None:
        self.evals.write({"rollout_id": rollout_id, "policy_version": policy_version, **metrics})
        self.backends.log("eval", rollout_id, metrics)
        if self.cfg.summary:
            accuracies = ", ".join(f"{k[5:]}={v:.3f}" for k, v in metrics.items() if k.endswith("accuracy"))
            self.print(f"eval after rollout {rollout_id}: {accuracies}")

    def print(self, line: str) -> None:
        tqdm.write(line) if self.cfg.progress else print(line, flush=True)

    def close(self, raise_error: bool = True) -> None:
        """Closes the files, writes the plot and hands it to the trackers, then closes them.
        While the run is already failing (``raise_error=False``) a failing plot is logged in one
        line instead, so that it cannot hide the error that ended the run (on a full disk, both fail)."""
        self.bar.close()
        self.metrics.close()
        self.evals.close()
        try:
            plot = self._plot(raise_error)
            if plot is not None:
                self.backends.log_file(plot)
        finally:
            self.backends.close(failed=not raise_error)

    def _plot(self, raise_error: bool) -> Path | None:
        if not (self.cfg.plot and self.metrics.path.is_file() and self.metrics.path.stat().st_size > 0):
            return None  # no rollout finished: nothing to plot
        out = self.run_dir / "reward_curve.png"
        try:
            evals = read_jsonl(self.evals.path) if self.evals.path.exists() else []
            return plot_reward_curve(read_jsonl(self.metrics.path), evals, out)
        except Exception as e:
            if raise_error:
                if isinstance(e, OSError):
                    raise RunError(f"could not write {out}: {describe_os_error(e)}") from e
                raise
            log.warning("%s not written: %s", out, e)
            return None


def summary_line(r: dict) -> str:
    parts = [
        f"rollout {r['rollout_id']:>4}",
        f"reward {r['reward/mean']:.3f}",
        f"loss {r.get('train/loss', float('nan')):+.4f}",
        f"kl {r.get('train/policy_drift_kl', 0.0):.4f}",
        f"clip {r.get('train/clip_fraction', 0.0):.3f}",
        f"entropy {r.get('train/entropy', 0.0):.3f}",
        f"len {r.get('response/length_mean', 0.0):.1f}",
        f"{r['time/rollout_s']:.2f}s",
    ]
    if "perf/samples_per_s" in r:
        parts.append(f"{r['perf/samples_per_s']:.1f} samples/s")
    if "eval/accuracy" in r:
        parts.append(f"eval {r['eval/accuracy']:.3f}")
    return " | ".join(parts)
