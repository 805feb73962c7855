"""``VLLMAdapter``: what heron's generic server engine needs to know about vLLM 0.32.

Launch: heron's launcher (``server_side/heron_vllm_launcher.py``) run by the vLLM venv's python,
with the flags the engine contract depends on (``launch_args``). After start-up it installs
heron's logprob convention in the worker (``heron_install_logprobs``).

Weights: one push is a safetensors file of HF-named tensors; ``/collective_rpc`` makes heron's
worker extension load it in place (vLLM's ``reload_weights``: no restart, no re-allocation),
then ``/reset_prefix_cache`` drops KV blocks computed with the old weights (a prompt seen before
the push would otherwise reuse them). The version is recorded on the worker last, so a server
that reports the new version has the new weights and no stale cache.

Sleep (CUDA only; vLLM's sleep mode does not exist on CPU): ``/sleep?level=1`` moves weights to
host RAM and drops the KV cache; level 2 drops both, so waking reloads the last pushed weights.
``/wake_up?tags=weights`` then ``?tags=kv_cache`` (weights first, the order vLLM recommends
around weight updates). UNTESTED: heron's test machines have no GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from heron.records import Generation, GenerationRequest
from heron.rollout.server.adapter import LaunchSpec
from heron.rollout.server.errors import EngineServerError
from heron.rollout.server.http import ServerClient
from heron.rollout.vllm.launch_args import VLLMLaunch
from heron.rollout.vllm.protocol import completion_payload, parse_completion


class VLLMAdapter:
    name = "vLLM"

    def __init__(self, launch: VLLMLaunch):
        self.settings = launch
        self.last_weights: Path | None = None  # for sleep level 2 (None: the model folder's)

    def launch(self, port: int) -> LaunchSpec:
        return LaunchSpec(self.settings.command(port), self.settings.env())

    def after_start(self, client: ServerClient) -> None:
        [result] = _rpc(client, "heron_install_logprobs", during="installing heron's logprob convention")
        if "patched" not in str(result):
            raise EngineServerError(f"vLLM worker did not install heron's logprob convention: {result!r}")

    def completion(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        return "/v1/completions", completion_payload(request)

    def parse(self, body: dict[str, Any], request: GenerationRequest, policy_version: int) -> Generation:
        return parse_completion(body, request, policy_version)

    def push_weights(self, client: ServerClient, weights_file: Path, version: int) -> None:
        _rpc(client, "heron_reload", during="load_weights", path=str(weights_file))
        self.last_weights = weights_file
        self._after_reload(client, version)

    def _after_reload(self, client: ServerClient, version: int) -> None:
        """Drops KV blocks of the old weights, then tags the new ones (a server that reports
        ``version`` has its weights and no stale cache)."""
        reset = client.post("/reset_prefix_cache", during="load_weights (prefix-cache reset)")
        if not (reset or {}).get("success", False):
            raise EngineServerError(f"vLLM could not reset its prefix cache after a weight push: {reset!r}")
        _rpc(client, "heron_set_version", during="load_weights", version=str(version))

    def rereads_pushed_files(self) -> bool:
        """At ``sleep_level=2`` a wake reloads the last pushed weights from their file, so every
        push must leave a file the engine keeps (no broadcast into the worker, no trainer's file)."""
        return self.settings.sleep_level == 2

    def join_weight_group(self, client: ServerClient, addr: str, port: int, rank: int, size: int, timeout_s: float) -> bool:
        """The worker joins heron's weight broadcast group as ``rank`` (heron_join_weight_group);
        not where the server rereads pushed files (the engine's process receives instead)."""
        if self.rereads_pushed_files():
            return False
        _rpc(client, "heron_join_weight_group", during="joining the weight broadcast group", addr=addr,
             port=str(port), rank=str(rank), size=str(size), timeout_s=str(timeout_s))
        return True

    def broadcast_layout(self, client: ServerClient, version: int) -> list[dict[str, Any]]:
        """The buckets rank 0 publishes for push ``version`` (heron.weights.broadcast's layout)."""
        [layout] = _rpc(client, "heron_weight_layout", during="load_weights (broadcast layout)", version=str(version))
        return layout

    def receive_weights(self, client: ServerClient, version: int, renames: dict[str, str], load: bool) -> None:
        """Receives push ``version`` in the worker, loading it in place bucket by bucket (or, with
        ``load=False``, receiving and dropping it), then resets the prefix cache and tags it."""
        _rpc(client, "heron_receive_weights", during="load_weights (broadcast)", version=str(version),
             renames=json.dumps(renames), load="1" if load else "0")
        if load:
            self._after_reload(client, version)

    def served_version(self, client: ServerClient) -> int:
        versions = {int(v) for v in _rpc(client, "heron_version", during="policy_version")}
        if len(versions) != 1:
            raise EngineServerError(f"vLLM workers serve different weight versions: {sorted(versions)}")
        return versions.pop()

    def sleep(self, client: ServerClient) -> None:  # UNTESTED (CUDA only)
        client.post("/sleep", during="sleep", params={"level": str(self.settings.sleep_level)})

    def wake(self, client: ServerClient) -> None:  # UNTESTED (CUDA only)
        client.post("/wake_up", during="wake (weights)", params={"tags": "weights"})
        if self.settings.sleep_level == 2:  # level 2 dropped the weights: reload what was served
            path = "" if self.last_weights is None else str(self.last_weights)
            _rpc(client, "heron_reload", during="wake (reload weights)", path=path)
        client.post("/wake_up", during="wake (kv cache)", params={"tags": "kv_cache"})


def _rpc(client: ServerClient, method: str, *, during: str, **kwargs: str) -> list:
    """Calls ``method`` of heron's worker extension on every worker; returns their results."""
    body = client.post("/collective_rpc", {"method": method, "kwargs": kwargs}, during=during)
    if not isinstance(body, dict) or "results" not in body:
        raise EngineServerError(f"vLLM /collective_rpc {method} returned {body!r}")
    return body["results"]
