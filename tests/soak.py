"""Trial counts of the long tests: the slow tier's by default, the soak's under `make soak`
(``HERON_SOAK=1``), or any count with ``HERON_TRIALS_<NAME>=N`` (e.g. to run a soak shorter)."""

from __future__ import annotations

import os


def trials(name: str, *, slow: int, soak: int) -> int:
    override = os.environ.get(f"HERON_TRIALS_{name.upper()}")
    if override:
        return int(override)
    return soak if os.environ.get("HERON_SOAK") == "1" else slow
