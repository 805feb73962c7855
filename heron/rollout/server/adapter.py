"""The boundary between heron's generic server engine and one serving framework (vLLM today).

``ServerEngine`` (``heron.rollout.server.engine``) owns everything that does not depend on the
framework: the process (launch on a free 127.0.0.1 port, health deadline, log file, stop on every
exit path), request validation, concurrent HTTP calls with deadlines, the weight layout check,
the versioned safetensors file of every push and the served-version check, and residency. An
adapter supplies only what differs between frameworks:

| member | vLLM (``heron.rollout.vllm.adapter``) | SGLang (not built; what it would use) |
|---|---|---|
| ``launch(port)`` | heron's launcher running the OpenAI server | ``python -m sglang.launch_server`` |
| ``after_start`` | installs heron's logprob convention (worker extension) | nothing, or the same check |
| ``completion(request)`` | ``/v1/completions`` body, token ids in and out | ``/generate`` with ``input_ids`` and ``sampling_params`` |
| ``parse(...)`` | ``choices[0].token_ids`` and ``logprobs`` | ``output_ids`` and ``meta_info.output_token_logprobs`` |
| ``push_weights`` | ``/collective_rpc`` -> worker extension reload, prefix-cache reset | ``/update_weights_from_disk`` (it versions too) |
| ``join_weight_group``, ``broadcast_layout``, ``receive_weights`` | the worker joins heron's broadcast group and reloads each bucket as it arrives | ``/init_weights_update_group``, ``/update_weights_from_distributed`` |
| ``served_version`` | worker extension's version | ``/get_model_info`` weight version |
| ``sleep`` / ``wake`` | ``/sleep?level=`` and ``/wake_up?tags=`` (CUDA only) | ``/release_memory_occupation`` / ``/resume_memory_occupation`` |

An SGLang adapter is not in heron: SGLang does not run on this project's CPU machines, and an
adapter tested only against a fake server would be a stub.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from heron.records import Generation, GenerationRequest
from heron.rollout.server.http import ServerClient


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one server: its command line, environment and health URL path."""

    command: list[str]
    env: dict[str, str]
    health_path: str = "/health"


class ServerAdapter(Protocol):
    name: str  # e.g. "vLLM"; used in messages

    def launch(self, port: int) -> LaunchSpec:
        """The command that serves the model on 127.0.0.1:``port``."""
        ...

    def after_start(self, client: ServerClient) -> None:
        """One-time set-up once the server is healthy (raises if the server is unfit)."""
        ...

    def completion(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """(URL path, JSON body) of the call that generates ``request``."""
        ...

    def parse(self, body: dict[str, Any], request: GenerationRequest, policy_version: int) -> Generation:
        """The server's answer to ``completion(request)`` as a ``Generation``."""
        ...

    def push_weights(self, client: ServerClient, weights_file: Path, version: int) -> None:
        """Loads ``weights_file`` (safetensors, HF names) in place and tags it ``version``."""
        ...

    def rereads_pushed_files(self) -> bool:
        """True when the server may read a pushed file again after its push (vLLM's wake at sleep
        level 2): the engine then pushes only files it owns, never the disk transport's own."""
        ...

    def join_weight_group(self, client: ServerClient, addr: str, port: int, rank: int, size: int, timeout_s: float) -> bool:
        """Makes the server's worker member ``rank`` of heron's weight broadcast group
        (``heron.weights.broadcast``, whose store serves on ``addr:port``); False when this server
        cannot receive pushes itself (the engine's own process then joins and receives)."""
        ...

    def broadcast_layout(self, client: ServerClient, version: int) -> list[dict[str, Any]]:
        """The layout rank 0 published for push ``version``: [{"dtype", "tensors": [[name, shape]]}]."""
        ...

    def receive_weights(self, client: ServerClient, version: int, renames: dict[str, str], load: bool) -> None:
        """Receives push ``version`` in the worker: loads it in place under ``renames`` (sent name ->
        checkpoint name, "" to skip) and tags it ``version``; ``load=False`` receives and drops it."""
        ...

    def served_version(self, client: ServerClient) -> int:
        """The version of the weights the server reports serving."""
        ...

    def sleep(self, client: ServerClient) -> None:
        """Releases device memory on the server (only called where the server supports it)."""
        ...

    def wake(self, client: ServerClient) -> None:
        """Undoes ``sleep``: weights first, then the KV cache."""
        ...
