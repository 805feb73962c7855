"""``heron ckpt export-hf``: a committed checkpoint → a standalone Hugging Face folder.

Separate from ``hf_export`` (which only *writes* HF folders while saving) because exporting
*reads* a checkpoint: keeping the two apart keeps the writer free of the reader."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from heron.atomic_file import publish_folder, temp_sibling
from heron.checkpoint import dcp_io
from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.hf_export import HF_META, write_hf_folder
from heron.checkpoint.lora_export import lora_model_config, write_lora_export
from heron.checkpoint.reader import open_checkpoint


def export_checkpoint(checkpoint: Path, out: Path, adapter: bool = False) -> Path:
    """Builds the model from the checkpoint's ``hf_meta``, loads its weights with DCP and
    writes an HF folder to ``out``; a LoRA checkpoint gives the merged model, or with
    ``adapter`` peft's adapter folder (heron.checkpoint.lora_export). The checkpoint is verified
    first (checksums, safe metadata); ``out`` must not exist (or be an empty folder), and appears
    only when complete (written next to it, then renamed)."""
    checkpoint, out = Path(checkpoint), Path(out)
    if (out.exists() or out.is_symlink()) and not _is_empty_folder(out):
        raise CheckpointError(f"export target {out} already exists; choose a new folder (nothing is overwritten)")
    opened = open_checkpoint(checkpoint)
    lora = lora_model_config(opened)
    if adapter and lora is None:
        raise CheckpointError(f"checkpoint {checkpoint} holds no LoRA adapters (model.lora.enabled=false); export it without --adapter")
    meta = checkpoint / HF_META
    if not (meta / "config.json").is_file():
        raise CheckpointError(f"checkpoint {checkpoint} has no {HF_META}/config.json; it cannot be exported")
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_sibling(out)
    try:
        if lora is None:
            write_hf_folder(temp, _full_model_state(checkpoint, meta), meta)
        else:
            write_lora_export(opened, lora, meta, temp, adapter)
        if _is_empty_folder(out):
            out.rmdir()  # an empty folder made for the export is taken
        return publish_folder(temp, out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def _full_model_state(checkpoint: Path, meta: Path) -> dict[str, torch.Tensor]:
    config = AutoConfig.from_pretrained(meta)
    dtype = getattr(config, "dtype", None) or torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    dcp_io.load_into(model, None, checkpoint)
    return dcp_io.live_state(model, None)["model"]


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
