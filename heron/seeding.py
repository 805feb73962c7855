"""Deterministic seeds derived from ids, so every random draw is a pure function of
(run.seed, ids) and a resumed run draws exactly what the uninterrupted run would have."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from any sequence of ids: ``derive_seed(run_seed, rollout_id, prompt_id, i)``."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
