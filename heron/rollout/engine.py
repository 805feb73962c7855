"""The rollout engine boundary: what the training loop may ask of whatever generates samples.

One protocol, several backends. ``EmbeddedEngine`` (``heron.rollout.embedded``) runs an HF
transformers causal LM in-process and is the CPU default; server adapters (SGLang, vLLM) for
GPUs implement the same three members, so the loop and the weight transport never know which
backend they drive.

Contract every backend keeps:
- ``generate`` returns one ``Generation`` per request, in request order, each stamped with the
  ``policy_version`` of the weights that produced it.
- ``Generation.logprobs[i]`` is log p(tokens[i] | prompt, tokens[:i]) at the request's
  temperature, before top-p truncation (greedy requests: temperature 1) -- the quantity the
  trainer recomputes from the same weights.
- A request's output depends only on the request (prompt, params including ``seed``) and the
  weights, never on which other requests share its batch (up to float round-off).
- ``load_weights`` replaces the weights in place and sets ``policy_version``; a state that does
  not fit the model (unknown or missing key, wrong shape) raises ``ValueError`` before any
  weight is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from heron.records import Generation, GenerationRequest

if TYPE_CHECKING:
    import torch


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates token samples with per-token logprobs from the current policy weights."""

    @property
    def policy_version(self) -> int:
        """Version of the weights currently loaded (set by ``load_weights``)."""
        ...

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Samples one completion per request; returns them in request order."""
        ...

    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Replaces the policy weights with ``state`` (HF parameter names) tagged ``version``."""
        ...
