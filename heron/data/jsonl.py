"""Reads prompt datasets from JSONL; a malformed row is reported with its file and line."""

from __future__ import annotations

import json
from pathlib import Path

from heron.errors import UserError
from heron.records import Prompt


class DataError(UserError):
    """A dataset problem, named with file and line."""


def load_prompts(path: str | Path, prompt_key: str = "prompt", label_key: str = "label") -> list[Prompt]:
    """Every row becomes a ``Prompt`` (``prompt_id`` = row index); other keys go to metadata."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"dataset '{path}' does not exist; check data.path")
    prompts: list[Prompt] = []
    with open(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            prompts.append(_parse_row(line, f"{path}:{line_no}", len(prompts), prompt_key, label_key))
    if not prompts:
        raise DataError(f"dataset '{path}' has no rows")
    return prompts


def _parse_row(line: str, where: str, prompt_id: int, prompt_key: str, label_key: str) -> Prompt:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: invalid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: row must be a JSON object, got {type(row).__name__}")
    for key in (prompt_key, label_key):
        if key not in row:
            raise DataError(f"{where}: missing key '{key}' (row keys: {sorted(row)})")
    if not isinstance(row[prompt_key], str):
        raise DataError(f"{where}: '{prompt_key}' must be a string, got {type(row[prompt_key]).__name__}")
    label = row[label_key]
    if not isinstance(label, (str, int, float)):
        raise DataError(f"{where}: '{label_key}' must be a string or number, got {type(label).__name__}")
    metadata = {k: v for k, v in row.items() if k not in (prompt_key, label_key)}
    return Prompt(prompt_id=prompt_id, text=row[prompt_key], label=str(label), metadata=metadata)
