"""Loads a whole prompt dataset into ``Prompt`` records, stopping at or skipping bad rows."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from heron.config.data import DataConfig
from heron.data.readers import read_rows
from heron.data.rows import DataError, parse_row
from heron.records import Prompt

log = logging.getLogger("heron.data")
MAX_LOGGED_BAD_ROWS = 20


@dataclass
class PromptDataset:
    """The prompts of one file, each with where it is (``wheres[i]``: ``file:line`` or
    ``file row N``); ``bad_rows`` names every skipped row (``data.on_bad_row=skip``) and
    ``long_prompts`` every prompt dropped for its length (``data.on_long_prompt=drop``, filled
    by heron.data.prompt_lengths)."""

    path: str
    prompts: list[Prompt]
    bad_rows: list[str]
    wheres: list[str]
    long_prompts: list[str] = field(default_factory=list)


def load_dataset(path: str | Path, cfg: DataConfig) -> PromptDataset:
    """Every good row becomes a Prompt whose ``prompt_id`` is its row index (0-based, bad rows
    included), so ids do not shift when rows are skipped."""
    prompts: list[Prompt] = []
    wheres: list[str] = []
    bad: list[str] = []
    for index, (where, row) in enumerate(read_rows(path, cfg.format, cfg.split)):
        try:
            if isinstance(row, DataError):
                raise row
            prompts.append(parse_row(row, where, index, cfg))
            wheres.append(where)
        except DataError as e:
            if cfg.on_bad_row == "error":
                raise DataError(f"{e} (or set data.on_bad_row=skip)") from None
            bad.append(str(e))
            if len(bad) <= MAX_LOGGED_BAD_ROWS:
                log.warning("skipping bad row: %s", e)
    if bad:
        log.warning("%s: skipped %d bad rows of %d", path, len(bad), len(bad) + len(prompts))
    if not prompts:
        raise DataError(f"dataset '{path}' has no usable rows" + (f" ({len(bad)} bad)" if bad else ""))
    return PromptDataset(str(path), prompts, bad, wheres)

