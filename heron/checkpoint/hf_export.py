"""HF export: a folder ``transformers.AutoModelForCausalLM.from_pretrained`` loads
(``model.safetensors``, ``config.json``, ``generation_config.json``, tokenizer files).

Every checkpoint carries the small non-weight files in ``hf_meta/``, so any checkpoint can be
exported later (``heron ckpt export-hf``) without the original model folder. Weights are
written with safetensors (no pickle); tensors that share storage (tied embeddings) are written
once, under their first name, and tied again by ``from_pretrained`` from the config.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.layout import fsync_tree

HF_META = "hf_meta"
HF_FOLDER = "hf"
WEIGHTS = "model.safetensors"


def write_hf_meta(folder: Path, model: torch.nn.Module | None, tokenizer=None) -> None:
    """Writes config, generation config and tokenizer of ``model`` into ``folder``. With
    ``model=None`` only the tokenizer (on Ray the driver has it, trainer rank 0 the model)."""
    has_config = hasattr(getattr(model, "config", None), "save_pretrained")
    if model is not None and not has_config:
        return  # not an HF model: the checkpoint cannot be exported, everything else works
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if has_config:
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))


def write_hf_folder(out: Path, model_state: dict[str, torch.Tensor], meta: Path) -> Path:
    """``out`` = the files of ``meta`` + ``model.safetensors`` from ``model_state`` (host tensors)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for path in Path(meta).iterdir():
        if path.is_file():
            shutil.copy2(path, out / path.name)
    seen, tensors = set(), {}
    for name, tensor in model_state.items():
        key = _storage_key(tensor)
        if key not in seen:
            seen.add(key)
            tensors[name] = tensor.detach().to("cpu").contiguous()
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "pt"})
    fsync_tree(out)
    return out


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    """Builds the model from the checkpoint's ``hf_meta``, loads its weights with DCP and
    writes an HF folder to ``out``. The checkpoint is verified first (checksums)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from heron.checkpoint import dcp_io
    from heron.checkpoint.manifest import verify

    checkpoint, out = Path(checkpoint), Path(out)
    verify(checkpoint)
    meta = checkpoint / HF_META
    if not (meta / "config.json").is_file():
        raise CheckpointError(f"checkpoint {checkpoint} has no {HF_META}/config.json; it cannot be exported")
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"export folder {out} is not empty; choose a new folder")
    config = AutoConfig.from_pretrained(meta)
    dtype = getattr(config, "dtype", None) or torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    dcp_io.load_into(model, None, checkpoint)
    return write_hf_folder(out, dcp_io.live_state(model, None)["model"], meta)
