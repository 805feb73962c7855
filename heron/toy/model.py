"""Creates a tiny causal LM of a real transformers architecture (Qwen3) with random weights,
saved with its tokenizer as a normal HF folder. Everything downstream loads it back with
``from_pretrained``, exactly as it would load a user's model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from heron.toy.tokenizer import train_tokenizer


@dataclass(frozen=True)
class ToyModelSpec:
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 256
    vocab_size: int = 512
    seed: int = 0


def create_toy_model(out_dir: Path, corpus: Iterable[str], spec: ToyModelSpec = ToyModelSpec()) -> Path:
    """Trains a tokenizer on ``corpus``, builds a random-weight Qwen3 model sized by ``spec``
    and saves both (plus a generation config) to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = train_tokenizer(corpus, spec.vocab_size, out_dir)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(out_dir)
    GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    ).save_pretrained(out_dir)
    return out_dir
