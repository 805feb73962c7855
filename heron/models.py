"""Loading an HF model folder: the one place heron calls ``from_pretrained`` for a policy."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_tokenizer(path: str):
    """The folder's tokenizer; a tokenizer without a pad token pads with EOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str) -> torch.nn.Module:
    """The folder's causal LM in ``dtype`` (``model.dtype``)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])


def load_backbone(path: str, dtype: str) -> torch.nn.Module:
    """The folder's base model without its LM head (``AutoModel``: hidden states out), in
    ``dtype``: the backbone of a value model (``heron.critic.value_model``)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(path, dtype=DTYPES[dtype])
