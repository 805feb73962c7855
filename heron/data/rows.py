"""One dataset row -> one ``Prompt``, with the configured keys; a bad row raises ``DataError``
naming where it is (``file:line`` for JSONL, ``file row N`` for tables)."""

from __future__ import annotations

from typing import Any

from heron.config.base import ConfigError
from heron.config.data import DataConfig
from heron.records import Prompt


class DataError(ConfigError):
    """A dataset problem, named with file and line (a user mistake: one line, before compute)."""


def parse_row(row: Any, where: str, prompt_id: int, cfg: DataConfig) -> Prompt:
    """Maps ``row`` to a Prompt: ``prompt_key`` -> text (or chat messages), ``label_key`` -> label,
    ``metadata_keys`` (default: every other key) -> metadata."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: row must be an object with keys, got {type(row).__name__}")
    keys = [cfg.prompt_key] + ([cfg.label_key] if cfg.label_key else []) + list(cfg.metadata_keys)
    for key in keys:
        if key not in row:
            raise DataError(f"{where}: missing key '{key}' (row keys: {sorted(row)}); check data.prompt_key/label_key/metadata_keys")
    text, messages = _prompt(row[cfg.prompt_key], where, cfg)
    label = row[cfg.label_key] if cfg.label_key else ""
    if isinstance(label, bool) or not isinstance(label, (str, int, float)):
        raise DataError(f"{where}: '{cfg.label_key}' must be a string or number, got {type(label).__name__}")
    used = (cfg.prompt_key, cfg.label_key)
    meta_keys = cfg.metadata_keys or [k for k in row if k not in used]
    return Prompt(
        prompt_id=prompt_id, text=text, label=str(label), metadata={k: row[k] for k in meta_keys}, messages=messages
    )


def _prompt(value: Any, where: str, cfg: DataConfig) -> tuple[str, list[dict[str, str]] | None]:
    key = cfg.prompt_key
    if isinstance(value, str):
        if not value.strip():
            raise DataError(f"{where}: '{key}' is empty; every row needs a prompt to answer")
        return value, None
    if isinstance(value, list) and value and all(_is_message(m) for m in value):
        if not cfg.apply_chat_template:
            raise DataError(f"{where}: '{key}' is a list of chat messages; set data.apply_chat_template=true to encode it")
        if not any(m["content"].strip() for m in value):
            raise DataError(f"{where}: every message of '{key}' is empty; every row needs a prompt to answer")
        messages = [{"role": m["role"], "content": m["content"]} for m in value]
        user_turns = [m["content"] for m in messages if m["role"] == "user"]
        return (user_turns[-1] if user_turns else messages[-1]["content"]), messages
    raise DataError(
        f"{where}: '{key}' must be a string or a list of {{role, content}} messages, got {type(value).__name__}"
    )


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
