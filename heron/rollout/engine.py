"""The rollout engine endpoint: what the run may ask of whatever generates samples.

One protocol, several implementations: ``EmbeddedEngine`` (``heron.rollout.embedded``, an HF
transformers causal LM in-process, the CPU default), ``ServerEngine`` (``heron.rollout.server``,
a vLLM server heron starts and owns: ``engine.kind=vllm``) and
``heron.cluster.engine_group.RemoteEngine`` (the driver's stand-in for engine actors on Ray). A
new backend is one more implementation plus one line in ``heron.rollout.registry``; the loop, the
generator, the evaluator and the weight transport never know which backend they drive.

Contract every backend keeps:
- ``generate`` returns one ``Generation`` per request, in request order, each stamped with the
  ``policy_version`` of the weights that produced it.
- ``Generation.logprobs[i]`` is log p(tokens[i] | prompt, tokens[:i]) at the request's
  temperature, before top-p truncation (greedy requests: temperature 1) -- the quantity the
  trainer recomputes from the same weights.
- A request's output depends only on the request (prompt, params including ``seed``) and the
  weights, never on which other requests share its batch (up to float round-off).
- ``load_weights(handle)`` replaces the weights in place and sets ``policy_version`` to
  ``handle.version``; a state that does not fit the model (unknown or missing key, wrong shape)
  raises ``ValueError`` before any weight is changed.
- ``served_versions()`` says which version each engine behind this endpoint serves (one entry
  for an in-process engine, one per actor or server otherwise); the run checks them after a push.
- ``holdings()`` declares what the engine holds on its device, for the residency layer.

Only with ``cluster.weight_transport=broadcast`` (engine actors on Ray), an engine also needs
``join_weight_group(addr, port, rank, size, timeout_s, bucket_bytes)``: it becomes member
``rank`` of the group trainer rank 0 sends on (``heron.weights.broadcast``), and its
``load_weights`` then receives the pushes whose handle says ``by_broadcast``. ``EmbeddedEngine``
joins in its own process; ``ServerEngine`` lets its server's worker join where the adapter can
(vLLM), so each bucket goes straight into the served model. It is not part of the protocol: an
engine without it runs with every other transport.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from heron.records import Generation, GenerationRequest

if TYPE_CHECKING:
    from heron.residency.state import Holdings
    from heron.weights.handle import WeightHandle


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

    def load_weights(self, handle: WeightHandle) -> None:
        """Replaces the policy weights with the handle's (HF parameter names), version included."""
        ...

    def served_versions(self) -> dict[str, int]:
        """Engine name -> the policy version it serves."""
        ...

    def holdings(self) -> Holdings:
        """What the engine holds on its device (weights, KV cache), for the residency layer."""
        ...

    def close(self) -> None:
        """Stops what the engine started (servers, actors); idempotent."""
        ...
