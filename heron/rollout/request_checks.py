"""Checks every engine applies to a ``GenerationRequest`` before it decodes anything."""

from __future__ import annotations

from heron.records import GenerationRequest


def validate_request(index: int, request: GenerationRequest) -> None:
    """Raises ``ValueError`` naming request ``index`` and the bad parameter."""
    p = request.params
    if not request.prompt_tokens:
        raise ValueError(f"request {index}: prompt_tokens is empty")
    if p.max_new_tokens < 1:
        raise ValueError(f"request {index}: max_new_tokens must be >= 1, got {p.max_new_tokens}")
    if not p.greedy and p.temperature <= 0:
        raise ValueError(f"request {index}: temperature must be > 0 (or greedy=True), got {p.temperature}")
    if not 0 < p.top_p <= 1:
        raise ValueError(f"request {index}: top_p must be in (0, 1], got {p.top_p}")
