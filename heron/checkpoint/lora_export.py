"""``heron ckpt export-hf`` of a LoRA checkpoint (heron.lora): its DCP shards hold the adapters
only, so the base weights come from the run's ``model.path`` (recorded in ``state.json``).

Two outputs: the merged model (``W + (alpha / r) * B A`` in every target layer; a plain HF folder
that ``AutoModelForCausalLM.from_pretrained`` loads), or with ``--adapter`` peft's adapter
folder (``adapter_config.json`` + ``adapter_model.safetensors``, pointing at ``model.path``), which
``peft.PeftModel.from_pretrained(base, folder)`` loads. Both carry the run's tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

from heron.checkpoint import dcp_io
from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.hf_export import write_hf_folder
from heron.checkpoint.reader import Checkpoint
from heron.config.model import ModelConfig

MODEL_FILES = ("config.json", "generation_config.json")  # hf_meta files that make a folder a full model


def lora_model_config(checkpoint: Checkpoint) -> ModelConfig | None:
    """The run's ``model`` section when it trained LoRA adapters, else None."""
    from heron.config.base import build

    model = checkpoint.state.get("config", {}).get("model", {})
    if not isinstance(model, dict) or not model.get("lora", {}).get("enabled"):
        return None
    return build(ModelConfig, model, "model")


def write_lora_export(checkpoint: Checkpoint, model_cfg: ModelConfig, meta: Path, out: Path, adapter: bool) -> None:
    """Writes the merged model (or, with ``adapter``, the adapter folder) into ``out``."""
    from heron.lora import apply_lora, merged_weights
    from heron.models import load_model

    if not Path(model_cfg.path, "config.json").is_file():
        raise CheckpointError(
            f"checkpoint {checkpoint.path} holds LoRA adapters of the base model model.path={model_cfg.path}, "
            f"which is not an HF model folder here; export where that folder is"
        )
    model = apply_lora(load_model(model_cfg.path, model_cfg.dtype), model_cfg.lora)
    dcp_io.load_into(model, None, checkpoint.path)
    if not adapter:
        write_hf_folder(out, merged_weights(model.state_dict(), model_cfg.lora.scaling), meta)
        return
    model.save_pretrained(out)
    for path in Path(meta).iterdir():  # the tokenizer, not the base model's config
        if path.is_file() and path.name not in MODEL_FILES:
            shutil.copy2(path, out / path.name)
