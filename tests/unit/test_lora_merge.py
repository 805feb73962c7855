"""The engine's merged LoRA weights (heron.lora.merged_weights) equal peft's ``merge_and_unload``
bit for bit, in float32 and with a bfloat16 base model, whose adapters peft keeps in float32:
the float32 delta is added into the bf16 weight in place and rounded once, as peft does (a
delta rounded to bf16 first gave different bits in 14 of 25 tensors)."""

from __future__ import annotations

import copy

import pytest
import torch

from heron.config.lora import LoraConfig
from heron.lora import apply_lora, merged_weights
from heron.models import load_model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_merged_weights_equal_peft_merge_and_unload(toy_model_dir, dtype):
    cfg = LoraConfig(enabled=True, rank=4, alpha=8.0)
    torch.manual_seed(0)
    model = apply_lora(load_model(str(toy_model_dir), dtype), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # B starts at 0: give the merge something to add
    ours = merged_weights({k: v.detach().clone() for k, v in model.state_dict().items()}, cfg.scaling)
    theirs = copy.deepcopy(model).merge_and_unload().state_dict()
    assert ours.keys() == theirs.keys()
    assert [k for k in theirs if not torch.equal(ours[k], theirs[k])] == []
    base = load_model(str(toy_model_dir), dtype).state_dict()
    assert sum(not torch.equal(ours[k], base[k]) for k in base) > 0


def test_applying_lora_warns_of_nothing_a_user_can_change(toy_model_dir):
    """peft reads transformers 5's deprecated ``is_gradient_checkpointing``; its FutureWarning
    named neither heron nor anything in the run's config, so apply_lora silences that one."""
    import warnings

    model = load_model(str(toy_model_dir), "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        apply_lora(model, LoraConfig(enabled=True, rank=4))
