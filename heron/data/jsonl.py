"""Backwards-compatible entry point: ``load_prompts(path, prompt_key, label_key)`` for any
supported format (see ``heron.data.dataset``)."""

from __future__ import annotations

from pathlib import Path

from heron.data.dataset import load_prompts as _load
from heron.data.rows import DataError
from heron.records import Prompt

__all__ = ["DataError", "load_prompts"]


def load_prompts(path: str | Path, prompt_key: str = "prompt", label_key: str = "label") -> list[Prompt]:
    return _load(path, prompt_key=prompt_key, label_key=label_key)
