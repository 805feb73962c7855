"""A model folder is checked cheaply before anything loads it: config, weights, tokenizer.

A broken folder used to fail late and obscurely: an invalid ``config.json`` or missing
weights as a raw transformers traceback after the data had loaded, and a folder without
tokenizer files as "prompt_tokens is empty" in the first rollout (transformers 5 then builds
an empty tokenizer that encodes every text to no tokens). Here each gives one line naming
the folder and the fix. Nothing heavy happens: ``AutoConfig`` reads the config, the
safetensors headers are read without the tensors, and the tokenizer (needed for the data
checks anyway) is loaded and tried on a short text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heron.config.base import ConfigError
from heron.models import load_tokenizer

PROBE_TEXT = "Hello, world: 12 + 30 = 42."


@dataclass(frozen=True)
class ModelFolder:
    """What the pre-flight learned about ``model.path``."""

    path: str
    model_type: str
    max_positions: int | None  # max_position_embeddings; None if the config has none
    tokenizer: Any


def inspect_model_folder(path: str) -> ModelFolder:
    """Checks ``path`` is a loadable HF causal-LM folder; one-line ``ConfigError`` if not."""
    folder = Path(path)
    config = _read_config(folder, path)
    _check_weights(folder, path)
    tokenizer = checked_tokenizer(path)
    positions = getattr(config, "max_position_embeddings", None)
    return ModelFolder(path, config.model_type, positions if isinstance(positions, int) else None, tokenizer)


def checked_tokenizer(path: str):
    """The tokenizer of ``path`` (pad = eos when it has no pad token); ``ConfigError`` when it
    does not load, encodes text to nothing, or has no eos token to stop generation with."""
    try:
        tok = load_tokenizer(path)
    except Exception as e:  # noqa: BLE001 -- transformers raises many types, with multi-line texts
        raise ConfigError(f"model.path '{path}': its tokenizer does not load ({_first_line(e)})") from None
    if not tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]:
        raise ConfigError(
            f"model.path '{path}' has no usable tokenizer (it encodes text to no tokens: tokenizer files such as "
            f"tokenizer.json are missing); save the tokenizer into the folder with tokenizer.save_pretrained"
        )
    if tok.eos_token_id is None:
        raise ConfigError(
            f"model.path '{path}': the tokenizer has no eos_token, so answers could never stop; "
            f"set eos_token in tokenizer_config.json"
        )
    return tok


def require_config_file(path: str) -> Path:
    """``path``'s config.json, or a one-line ``ConfigError`` if it is not an HF model folder."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ConfigError(f"model.path '{path}' is not an HF model folder (no config.json)")
    return file


def _read_config(folder: Path, path: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    file = require_config_file(path)
    try:
        json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"model.path '{path}': config.json is not valid JSON ({_first_line(e)})") from None
    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"model.path '{path}': transformers cannot read its config.json ({_first_line(e)})") from None
    if type(config) not in AutoModelForCausalLM._model_mapping:
        raise ConfigError(f"model.path '{path}' holds a {type(config).__name__} model, which is not a causal LM")
    return config


def _check_weights(folder: Path, path: str) -> None:
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

    if (folder / SAFE_WEIGHTS_INDEX_NAME).is_file():
        files = _indexed_files(folder / SAFE_WEIGHTS_INDEX_NAME, path)
    elif (folder / SAFE_WEIGHTS_NAME).is_file():
        files = [SAFE_WEIGHTS_NAME]
    elif (folder / WEIGHTS_INDEX_NAME).is_file():
        files = _indexed_files(folder / WEIGHTS_INDEX_NAME, path)
    elif (folder / WEIGHTS_NAME).is_file():
        files = [WEIGHTS_NAME]
    else:
        raise ConfigError(
            f"model.path '{path}' has no weights ({SAFE_WEIGHTS_NAME}, {SAFE_WEIGHTS_INDEX_NAME} or {WEIGHTS_NAME}); "
            f"save the model into it with save_pretrained"
        )
    for name in files:
        if not (folder / name).is_file():
            raise ConfigError(f"model.path '{path}': weight file {name} (listed in its index) is missing")
        if name.endswith(".safetensors"):
            _check_safetensors_header(folder / name, path)


def _indexed_files(index: Path, path: str) -> list[str]:
    try:
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"model.path '{path}': {index.name} is not a valid weight index ({_first_line(e)})") from None


def _check_safetensors_header(file: Path, path: str) -> None:
    """Reads the header (names, shapes, offsets) and checks the file is as long as it says."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as e:  # noqa: BLE001 -- SafetensorError and OSError
        raise ConfigError(f"model.path '{path}': {file.name} is not a readable safetensors file ({_first_line(e)})") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
