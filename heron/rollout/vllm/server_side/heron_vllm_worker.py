"""heron's vLLM worker extension (``--worker-extension-cls heron_vllm_worker.HeronWorkerExtension``).

Runs inside vLLM's worker process, in the vLLM venv; imports nothing from heron. heron calls its
methods over HTTP through ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``); arguments arrive
as strings, results go back as JSON.

- ``heron_reload(path)``: loads a safetensors file of HF-named weights in place, through vLLM's
  own ``reload_weights`` (it redoes the post-load processing, e.g. the repacking of linear
  weights on CPU, that a plain ``model.load_weights`` would skip), then redoes the
  post-processing of a tied LM head, which ``reload_weights`` misses. ``path=""`` reloads the
  model folder the server started from.
- ``heron_join_weight_group(addr, port, rank, size, timeout_s)`` and
  ``heron_receive_weights(version, renames, load)``: ``cluster.weight_transport=broadcast`` straight
  into this worker. It joins the group trainer rank 0 sends on (``heron.weights.broadcast``: the
  group's ``TCPStore``, gloo on CPU, NCCL on CUDA) as one more member, then receives each push
  bucket by bucket on its own device, feeding each bucket's tensors to the same in-place
  ``reload_weights`` as it arrives: the push needs one bucket of memory beside the model, and the
  weights pass through no file and no other process. ``load="0"`` receives the push and drops it
  (heron refused its layout; the sender still completes).
- ``heron_set_version(version)`` / ``heron_version()``: the version of the weights this worker
  serves (0 = the model folder's). heron sets it after a reload and the prefix-cache reset.
- ``heron_install_logprobs()``: makes the reported logprob of a sampled token
  log_softmax(logits / temperature)[token] over the full vocabulary, i.e. BEFORE top-k/top-p
  truncation, which is heron's engine contract. With ``--logprobs-mode processed_logprobs``
  vLLM reports it AFTER truncation (renormalised over the nucleus; equal only when top_p = 1);
  ``raw_logprobs`` would be before temperature. The patch wraps the worker's top-k/top-p
  sampler: it takes log_softmax of the temperature-scaled logits it receives, then samples as
  before. Greedy-only batches never reach that sampler; for them vLLM reports log_softmax(logits)
  (temperature 1), also heron's contract. Returns a description of what it patched.
"""

from __future__ import annotations


import json
import math

DTYPES = ("float32", "bfloat16", "float16", "float64", "int64")  # heron.weights.broadcast's


class HeronWorkerExtension:
    _heron_version = 0
    _heron_group = None  # (store, process group, device) once heron_join_weight_group ran

    def heron_reload(self, path: str) -> None:
        from safetensors.torch import load_file

        if path:
            state = load_file(path, device="cpu")
            self.model_runner.reload_weights(weights_iterator=iter(state.items()), is_checkpoint_format=True)
        else:
            self.model_runner.reload_weights()  # the model folder the server started from
        self._refresh_tied_head()

    def heron_join_weight_group(self, addr: str, port: str, rank: str, size: str, timeout_s: str) -> int:
        """Joins heron's weight broadcast group as ``rank`` (blocks until every member joined)."""
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        timeout = timedelta(seconds=float(timeout_s))
        store = dist.TCPStore(addr, int(port), int(size), is_master=False, timeout=timeout)
        device = getattr(self, "device", None) or torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(store, int(rank), int(size), options)
        else:
            group = dist.ProcessGroupGloo(store, int(rank), int(size), timeout)
        self._heron_group = (store, group, device)
        return int(rank)

    def heron_weight_layout(self, version: str) -> list:
        """The layout heron's sender published for push ``version``: [{"dtype", "tensors": [[name,
        shape]]}] (waits for it, bounded by the group's timeout)."""
        if self._heron_group is None:
            raise RuntimeError("heron_weight_layout: this worker joined no weight group (heron_join_weight_group)")
        return json.loads(self._heron_group[0].get(f"layout/{version}"))

    def heron_receive_weights(self, version: str, renames: str, load: str) -> int:
        """Receives push ``version`` from the group and, with ``load="1"``, reloads it in place
        bucket by bucket; ``renames`` is JSON {sent name: checkpoint name, "" to skip it}. Every bucket is
        received even when the reload fails, so the sender is never left waiting. Returns the
        number of tensors received."""
        if self._heron_group is None:
            raise RuntimeError("heron_receive_weights: this worker joined no weight group (heron_join_weight_group)")
        stream = _BucketStream(*self._heron_group, version=int(version), renames=json.loads(renames))
        try:
            if load == "1":
                self._heron_version = -1  # torn until heron sets the pushed version
                self.model_runner.reload_weights(weights_iterator=iter(stream), is_checkpoint_format=True)
                self._refresh_tied_head()
        finally:
            stream.drain()
        outcome = "loaded" if load == "1" else "dropped (heron refused its layout)"
        print(f"heron: weight push {version} received by broadcast: {stream.received} tensors in "
              f"{len(stream.buckets)} buckets, {outcome}", flush=True)  # into the server's log
        return stream.received

    def heron_set_version(self, version: str) -> int:
        self._heron_version = int(version)
        return self._heron_version

    def _refresh_tied_head(self) -> None:
        """A tied LM head shares the embedding's parameter, which the reload updated in place, but
        it loads no weight of its own, so the reload skips its post-processing; on CPU that keeps
        the packed GEMM copy of the OLD embedding (measured: greedy tokens of the old head after a
        push). Redo the head's post-processing from the current weight."""
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        tied = getattr(self.vllm_config.model_config.hf_config, "tie_word_embeddings", False)
        process = getattr(getattr(head, "quant_method", None), "process_weights_after_loading", None)
        if tied and process is not None:
            process(head)

    def heron_version(self) -> int:
        return self._heron_version

    def heron_install_logprobs(self) -> str:
        import torch

        sampler = self.model_runner.sampler.topk_topp_sampler
        if getattr(sampler, "_heron_patched", False):
            return "already patched"
        if sampler.logprobs_mode != "processed_logprobs":
            raise RuntimeError(f"heron needs --logprobs-mode processed_logprobs, the server runs {sampler.logprobs_mode}")
        sample = sampler.forward

        def forward(logits, generators, k, p):
            full = logits.log_softmax(dim=-1, dtype=torch.float32)  # [B, V]; before top-k/top-p (in place)
            tokens, _truncated = sample(logits, generators, k, p)
            return tokens, full

        sampler.forward = forward
        sampler._heron_patched = True
        return f"patched {type(sampler).__name__}.forward ({getattr(sample, '__name__', '?')})"


class _BucketStream:
    """One push's tensors as they arrive: each bucket (one dtype, ``layout/<version>`` in the
    group's store, written by heron's sender) is received into a fresh flat buffer on ``device``
    and handed out as views under their checkpoint names; only the bucket being loaded is held."""

    def __init__(self, store, group, device, *, version: int, renames: dict):
        self.group, self.device, self.renames = group, device, renames
        self.buckets = json.loads(store.get(f"layout/{version}"))
        self.next_bucket = 0
        self.received = 0
        self.failed = False  # a receive failed: the group is broken, drain stops

    def __iter__(self):
        while self.next_bucket < len(self.buckets):
            for name, tensor in self._receive(self.buckets[self.next_bucket]):
                target = self.renames.get(name, name)
                if target:  # "": an alias whose checkpoint name is in the push too
                    yield target, tensor

    def drain(self) -> None:
        """Receives (and drops) every bucket not received yet."""
        while not self.failed and self.next_bucket < len(self.buckets):
            self._receive(self.buckets[self.next_bucket])

    def _receive(self, bucket: dict) -> list:
        import torch
        import torch.distributed as dist

        if bucket["dtype"].removeprefix("torch.") not in DTYPES:
            raise ValueError(f"heron_receive_weights: unknown dtype {bucket['dtype']!r}")
        sizes = [math.prod(shape) for _, shape in bucket["tensors"]]
        flat = torch.empty(sum(sizes), dtype=getattr(torch, bucket["dtype"].removeprefix("torch.")), device=self.device)
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.next_bucket += 1
        try:
            self.group.broadcast([flat], options).wait()
        except Exception:
            self.failed = True
            raise
        self.received += len(sizes)
        return [(name, part.view(shape)) for (name, shape), part in zip(bucket["tensors"], flat.split(sizes))]
