"""The command line and environment heron starts a vLLM server with (pure; unit-tested).

Flags heron always sets, and why:
- ``--host 127.0.0.1``: loopback only; the server runs in dev mode (``/collective_rpc``).
- ``--logprobs-mode processed_logprobs`` + ``--worker-extension-cls``: logprobs after
  temperature (heron's worker extension then moves them before top-p; see heron_vllm_worker).
- ``--generation-config vllm``: ignore the model folder's generation_config.json, so no default
  sampling setting of the model sneaks into a request heron fully specifies.
- ``--max-logprobs 1``: heron asks for the sampled token's logprob only.
- ``--seed``: the server's seed (each request also carries its own).
- ``--kv-cache-memory-bytes``: an explicit KV cache (on CPU vLLM otherwise reserves a fraction of
  ALL host RAM, and skips its warm-up pass when the size is explicit and execution eager).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from heron.rollout.vllm.protocol import SERVED_MODEL_NAME

SERVER_SIDE = Path(__file__).resolve().parent / "server_side"
LAUNCHER = SERVER_SIDE / "heron_vllm_launcher.py"
WORKER_EXTENSION = "heron_vllm_worker.HeronWorkerExtension"
# heron's own venv leaks into a child through these; the vLLM venv must not see them
_DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


@dataclass(frozen=True)
class VLLMLaunch:
    python: str
    model: str
    dtype: str
    max_model_len: int
    max_num_seqs: int
    seed: int
    device: str = "cpu"
    enforce_eager: bool = True
    kv_cache_bytes: int = 0
    gpu_memory_utilization: float = 0.5
    enable_sleep_mode: bool = False
    sleep_level: int = 1
    cpu_bind: str = "auto"
    grace_s: float = 20.0
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def command(self, port: int) -> list[str]:
        args = [
            self.python, str(LAUNCHER),
            "--model", self.model,
            "--served-model-name", SERVED_MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--seed", str(self.seed),
            "--logprobs-mode", "processed_logprobs",
            "--max-logprobs", "1",
            "--generation-config", "vllm",
            "--worker-extension-cls", WORKER_EXTENSION,
            "--gpu-memory-utilization", str(self.gpu_memory_utilization),
        ]
        if self.kv_cache_bytes > 0:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_bytes)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.enable_sleep_mode:
            args.append("--enable-sleep-mode")
        return args + list(self.extra_args)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _DROPPED_ENV}
        env.update({
            "HERON_VLLM_GRACE_S": str(self.grace_s),
            "HF_HUB_OFFLINE": "1",  # a local folder; never reach for a hub
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        })
        if self.device == "cpu":
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # --kv-cache-memory-bytes is the one size
        return env
