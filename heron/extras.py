"""Optional dependencies: which feature needs which ``heron[extra]`` (pyproject.toml's
``project.optional-dependencies``). The core install runs the embedded local path; a config that
picks a feature beyond it is checked here in the pre-flight, so a missing package is one line
naming the key and the pip command, before anything loads, rather than an ImportError mid-run.
Nothing is imported to check: ``importlib.util.find_spec`` only looks the module up."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from heron.errors import UserError


@dataclass(frozen=True)
class Extra:
    name: str  # pip install 'heron[name]'
    modules: tuple[str, ...]  # top-level modules the feature imports
    what: str  # for the message: "needs <what>"


EXTRAS = {
    "ray": Extra("ray", ("ray", "psutil"), "Ray"),
    "data": Extra("data", ("datasets", "pyarrow"), "datasets and pyarrow"),
    "math": Extra("math", ("math_verify",), "math-verify"),
    "tracking": Extra("tracking", ("tensorboard", "wandb", "mlflow", "sqlalchemy", "alembic"), "the trackers"),
    "vllm": Extra("vllm", ("requests",), "requests"),
    "lora": Extra("lora", ("peft",), "peft"),
}


class MissingExtraError(UserError):
    """A chosen feature's optional dependency is not installed."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a broken entry
        return False


def require_extra(extra: str, feature: str, modules: tuple[str, ...] = (), what: str = "") -> None:
    """Raises ``MissingExtraError`` naming ``feature`` (e.g. ``cluster.backend=ray``) when a module
    of ``EXTRAS[extra]`` is not installed; ``modules`` (and ``what``) narrow it to the ones this
    feature imports (``tracking.wandb`` needs wandb, not TensorBoard)."""
    spec = EXTRAS[extra]
    assert set(modules) <= set(spec.modules), f"heron[{extra}] does not install {modules}"
    missing = [m for m in modules or spec.modules if not installed(m)]
    if missing:
        raise MissingExtraError(
            f"{feature} needs {what or spec.what} (no module {', '.join(map(repr, missing))}): pip install 'heron[{spec.name}]'"
        )
