"""heron's vLLM worker extension (``--worker-extension-cls heron_vllm_worker.HeronWorkerExtension``).

Runs inside vLLM's worker process, in the vLLM venv; imports nothing from heron. heron calls its
methods over HTTP through ``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``); arguments arrive
as strings, results go back as JSON.

- ``heron_reload(path)``: loads a safetensors file of HF-named weights in place, through vLLM's
  own ``reload_weights`` (it redoes the post-load processing, e.g. the repacking of linear
  weights on CPU, that a plain ``model.load_weights`` would skip), then redoes the
  post-processing of a tied LM head, which ``reload_weights`` misses. ``path=""`` reloads the
  model folder the server started from.
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


class HeronWorkerExtension:
    _heron_version = 0

    def heron_reload(self, path: str) -> None:
        from safetensors.torch import load_file

        if path:
            state = load_file(path, device="cpu")
            self.model_runner.reload_weights(weights_iterator=iter(state.items()), is_checkpoint_format=True)
        else:
            self.model_runner.reload_weights()  # the model folder the server started from
        self._refresh_tied_head()

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
