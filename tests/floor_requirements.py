"""requirements.txt with each package of ``FLOORS`` pinned at the lowest version pyproject.toml
admits, printed to stdout; `make test-floor` installs it into .venv-floor and runs the default tier.

Why: pyproject.toml declares ranges (``transformers>=5.17,<6``) but `make` installs one pin from
each, so a range's floor is a promise nothing checks. The GPU machines' image carries torch
2.11.0 and transformers 5.17.0 (the device tool's package list), and bench/gpu_check.sh runs
heron on that image's own packages: an API heron uses that either lacks would fail there, in a
15-minute lease, not here. Which floors: torch and transformers, the libraries heron reaches into
most (DCP, FSDP2, oneDNN's packed linears, SDPA; the attention registry, caches, masks, RoPE,
``from_pretrained``). torch's floor comes from PyPI as its CUDA build (~3 GB with its CUDA
libraries), which runs on a machine without a GPU like the CPU build; the other core floors are
libraries whose APIs heron uses lightly.

    python tests/floor_requirements.py > .venv-floor/requirements.txt
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
FLOORS = ("torch", "transformers")


def floor_version(name: str) -> str:
    """The ``>=`` bound of ``name`` in pyproject.toml's core dependencies."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        req = Requirement(line)
        if canonicalize_name(req.name) == canonicalize_name(name):
            bounds = [spec.version for spec in req.specifier if spec.operator == ">="]
            if len(bounds) != 1:
                raise SystemExit(f"pyproject.toml: {line!r} has no single '>=' floor")
            return bounds[0]
    raise SystemExit(f"pyproject.toml declares no core dependency {name!r}")


def floor_requirements() -> str:
    """requirements.txt's text with every FLOORS pin moved to its floor (``==`` the floor version)."""
    floors = {canonicalize_name(name): floor_version(name) for name in FLOORS}
    lines = []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        req = Requirement(spec) if spec else None
        if req is not None and canonicalize_name(req.name) in floors:
            line = f"{req.name}=={floors.pop(canonicalize_name(req.name))}  # pyproject's floor"
        lines.append(line)
    if floors:
        raise SystemExit(f"requirements.txt pins none of {sorted(floors)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(floor_requirements())
