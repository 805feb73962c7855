"""The optional dependencies a config's features need (``heron.extras``): checked first in the
pre-flight, so ``cluster.backend=ray`` without Ray is one line with the pip command, not an
ImportError after the model loaded (or, for a reward, a silent 0 from ``reward.on_error``).
Data formats are checked where a dataset is read (``heron.data.readers``)."""

from __future__ import annotations

from heron.config.root import HeronConfig
from heron.extras import require_extra


def check_extras(cfg: HeronConfig) -> None:
    if cfg.cluster.backend == "ray":
        require_extra("ray", "cluster.backend=ray")
    if cfg.reward.fn == "math":
        require_extra("math", "reward.fn=math")
    if cfg.engine.kind == "vllm":
        require_extra("vllm", "engine.kind=vllm")
    if cfg.tracking.tensorboard:
        require_extra("tracking", "tracking.tensorboard=true", ("tensorboard",), "TensorBoard")
    if cfg.tracking.wandb.enabled:
        require_extra("tracking", "tracking.wandb.enabled=true", ("wandb",), "wandb")
    if cfg.tracking.mlflow.enabled:
        require_extra("tracking", "tracking.mlflow.enabled=true", ("mlflow", "sqlalchemy", "alembic"), "MLflow")
    if cfg.model.lora.enabled:
        require_extra("lora", "model.lora.enabled=true")
