"""Translation between heron's records and vLLM's OpenAI-compatible ``/v1/completions`` API.

One heron request is one completions request (each has its own seed and sampling params; the
server batches them continuously). The request is in token ids and asks for token ids back:

- ``prompt`` is the list of prompt token ids; ``return_token_ids`` returns the completion's ids.
- Stopping is heron's: ``ignore_eos`` turns off vLLM's own EOS check and ``stop_token_ids``
  carries the request's stop tokens (heron puts EOS there), so a row stops on exactly the same
  tokens as in the embedded engine, the stop token kept with its logprob.
- ``logprobs: 0`` returns the sampled token's logprob (no alternatives). Which logprob that is
  is fixed at server start: ``--logprobs-mode processed_logprobs`` plus heron's worker extension
  make it log_softmax(logits / temperature)[token] before top-p truncation, heron's contract
  (``heron.rollout.engine``); greedy requests (``temperature: 0``) report temperature 1.
- ``top_k: 0`` (off), ``min_p: 0`` and no penalties: nothing but temperature and top-p shapes sampling.
"""

from __future__ import annotations

import math
from typing import Any

from heron.records import Generation, GenerationRequest
from heron.rollout.server.errors import EngineServerError

SERVED_MODEL_NAME = "heron-policy"
FINISH_REASONS = {"stop": "stop", "length": "length"}


def completion_payload(request: GenerationRequest) -> dict[str, Any]:
    """The ``/v1/completions`` body for one heron request."""
    p = request.params
    return {
        "model": SERVED_MODEL_NAME,
        "prompt": list(request.prompt_tokens),
        "max_tokens": p.max_new_tokens,
        "temperature": 0.0 if p.greedy else p.temperature,
        "top_p": 1.0 if p.greedy else p.top_p,
        "top_k": 0,  # 0 = off in vLLM 0.32
        "min_p": 0.0,
        "seed": p.seed,
        "n": 1,
        "logprobs": 0,
        "stop_token_ids": list(p.stop_token_ids),
        "ignore_eos": True,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,
    }


def parse_completion(body: dict[str, Any], request: GenerationRequest, policy_version: int) -> Generation:
    """One ``/v1/completions`` answer -> a ``Generation``; raises ``EngineServerError`` on an answer
    that breaks the contract (so a protocol change in vLLM fails loudly, not as wrong samples)."""
    try:
        choice = body["choices"][0]
        tokens = [int(t) for t in choice["token_ids"]]
        logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        reason = choice["finish_reason"]
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise EngineServerError(f"vLLM answer lacks {error!s} (token_ids, logprobs or finish_reason): {str(body)[:300]}") from None
    if reason not in FINISH_REASONS:
        raise EngineServerError(f"vLLM finished a request with {reason!r} (expected stop or length): {str(body)[:300]}")
    if len(tokens) != len(logprobs) or not tokens:
        raise EngineServerError(f"vLLM returned {len(tokens)} tokens but {len(logprobs)} logprobs")
    if any(math.isnan(x) or x > 0 for x in logprobs):
        raise EngineServerError(f"vLLM returned invalid logprobs (NaN or > 0): {logprobs[:8]}")
    if reason == "stop" and tokens[-1] not in request.params.stop_token_ids:
        raise EngineServerError(f"vLLM stopped on token {tokens[-1]}, which is not a stop token of the request")
    return Generation(tokens=tokens, logprobs=logprobs, finish_reason=FINISH_REASONS[reason], policy_version=policy_version)
