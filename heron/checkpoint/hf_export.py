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

from heron.atomic_file import fsync_tree

HF_META = "hf_meta"
HF_FOLDER = "hf"
WEIGHTS = "model.safetensors"


def write_model_meta(folder: Path, model: torch.nn.Module) -> None:
    """Writes config and generation config of ``model`` (unwrapped from DDP and peft) into ``folder``."""
    from torch.nn.parallel import DistributedDataParallel
    from transformers import PreTrainedModel

    from heron.lora import unwrap

    if isinstance(model, DistributedDataParallel):
        model = model.module
    model = unwrap(model)  # a LoRA policy: the base model's config
    if not isinstance(model, PreTrainedModel):
        return  # not an HF model: the checkpoint cannot be exported, everything else works
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(folder)


def write_tokenizer(folder: Path, tokenizer) -> None:
    """Writes the run's tokenizer files into ``folder`` (beside the model's config)."""
    if tokenizer is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
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
