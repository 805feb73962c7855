from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases (``heron[tracking]``): the run config once, metrics per rollout, eval per
    set, the reward curve as an artifact. Offline mode writes under run.dir/wandb (``wandb sync``
    uploads it later). A W&B failure (no key, no network) warns once and the run goes on."""

    enabled: bool = doc("Also log to Weights & Biases.", False)
    project: str = doc("W&B project.", "heron")
    entity: str = doc("W&B entity (user or team); empty = your default entity.", "")
    name: str = doc("W&B run name; empty = the name of run.dir.", "")
    group: str = doc("W&B run group; empty = none.", "")
    tags: list[str] = doc("W&B run tags.", factory=list)
    mode: Literal["online", "offline"] = doc("online: stream to the W&B server; offline: files under run.dir/wandb only.", "online")
    init_timeout_s: float = doc("Deadline for wandb.init to reach the server, in seconds (then a warning, no W&B).", 30.0)

    def __post_init__(self):
        check(self.project != "", "tracking.wandb.project must not be empty")
        check(self.init_timeout_s > 0, f"tracking.wandb.init_timeout_s must be > 0, got {self.init_timeout_s}")


@dataclass(frozen=True)
class MlflowConfig:
    """MLflow (``heron[tracking]``): the run config as params once, metrics per rollout, eval per
    set, the reward curve as an artifact. A failing store (unreachable server, bad credentials)
    warns once and the run goes on."""

    enabled: bool = doc("Also log to MLflow.", False)
    tracking_uri: str = doc(
        "MLflow tracking URI: a server (http://host:port) or a store (sqlite:///file.db); empty = "
        "MLFLOW_TRACKING_URI, else sqlite:///<run.dir>/mlflow.db.", ""
    )
    experiment: str = doc("MLflow experiment name (created if missing).", "heron")
    run_name: str = doc("MLflow run name; empty = the name of run.dir.", "")
    request_timeout_s: float = doc("Deadline of one request to an MLflow server, in seconds.", 10.0)
    max_retries: int = doc("Retries of a failed request to an MLflow server (each within request_timeout_s).", 1)

    def __post_init__(self):
        check(self.experiment != "", "tracking.mlflow.experiment must not be empty")
        check(self.request_timeout_s > 0, f"tracking.mlflow.request_timeout_s must be > 0, got {self.request_timeout_s}")
        check(self.max_retries >= 0, f"tracking.mlflow.max_retries must be >= 0, got {self.max_retries}")


@dataclass(frozen=True)
class ProfileConfig:
    """torch.profiler over whole rollouts (heron.tracking.profiler): each rollout named in
    ``rollouts`` writes run.dir/profile/rollout_<id>/trace.json (a Chrome trace: Perfetto or
    chrome://tracing) and ops.txt (the operators by self time). Each stage of the rollout is a
    ``heron.<stage>`` range in the trace (generate, reward, train, push_weights, eval, checkpoint).
    With cluster.backend=ray each actor writes its own <actor>.trace.json and <actor>.ops.txt there."""

    rollouts: list[int] = doc("Rollout ids to profile (e.g. [2, 50]); empty = no profiling.", factory=list)
    record_shapes: bool = doc("Record each operator's input shapes (ops.txt then groups by shape).", False)
    profile_memory: bool = doc("Record tensor memory allocated and freed by each operator.", False)
    with_stack: bool = doc("Record the Python stack of each operator (larger traces).", False)

    def __post_init__(self):
        negative = [r for r in self.rollouts if r < 0]
        check(not negative, f"tracking.profile.rollouts names rollout ids from 0, got {negative}")


def check_profiled_rollouts(profile: ProfileConfig, num_rollouts: int) -> None:
    """Every profiled rollout is one the run has (a later one would silently profile nothing)."""
    past = sorted(r for r in profile.rollouts if r >= num_rollouts)
    check(not past, f"tracking.profile.rollouts={past} lies past the last rollout: rollout.num_rollouts="
                    f"{num_rollouts} runs rollouts 0..{num_rollouts - 1}; profile one of those")


@dataclass(frozen=True)
class TrackingConfig:
    """What the user sees: progress bar, per-rollout summary, metrics file, plots, and the
    optional trackers (TensorBoard, W&B, MLflow) beside metrics.jsonl, which is always written."""

    progress: bool = doc("Show a progress bar over rollouts.", True)
    summary: bool = doc("Print a one-line summary per rollout.", True)
    plot: bool = doc("Write reward_curve.png into run.dir at the end.", True)
    tensorboard: bool = doc("Also write TensorBoard event files into run.dir/tb.", False)
    wandb: WandbConfig = doc("Weights & Biases.", factory=WandbConfig)
    mlflow: MlflowConfig = doc("MLflow.", factory=MlflowConfig)
    profile: ProfileConfig = doc("torch.profiler traces of chosen rollouts.", factory=ProfileConfig)
    peak_tflops: float = doc(
        "Peak dense TFLOP/s of one trainer device in the training precision (e.g. 989 for an H100 SXM in bf16; "
        "on a CPU, bench/throughput.py's product rate); > 0 adds perf/mfu = the training's model FLOPs per second "
        "per device / this peak (heron.trainer.model_flops). 0: no perf/mfu.", 0.0
    )

    def __post_init__(self):
        check(self.peak_tflops >= 0, f"tracking.peak_tflops must be >= 0 (0: no perf/mfu), got {self.peak_tflops}")
