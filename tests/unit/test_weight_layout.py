"""A push to a server engine is checked against the served model's checkpoint layout before
anything is sent: unknown keys, wrong shapes and missing tensors raise ValueError naming the key;
tied weights accept either name and are written once."""

import pytest
import torch
from safetensors.torch import load_file

from heron.rollout.server.weight_layout import WeightLayout


@pytest.fixture(scope="module")
def layout_and_state(toy_model_dir):
    return WeightLayout.from_folder(toy_model_dir), load_file(str(toy_model_dir / "model.safetensors"))


def test_a_trainer_state_dict_with_tied_aliases_is_pushed_once_per_tensor(layout_and_state, toy_model_dir):
    from transformers import AutoModelForCausalLM

    layout, stored = layout_and_state
    trainer_state = AutoModelForCausalLM.from_pretrained(toy_model_dir).state_dict()  # has lm_head.weight too
    assert "lm_head.weight" in trainer_state and "lm_head.weight" not in stored
    pushed = layout.to_push(trainer_state)
    assert set(pushed) == set(stored)
    assert pushed["model.embed_tokens.weight"] is trainer_state["model.embed_tokens.weight"]


def test_the_lm_head_name_alone_stands_for_the_tied_embedding(layout_and_state):
    layout, stored = layout_and_state
    state = {("lm_head.weight" if k == "model.embed_tokens.weight" else k): v for k, v in stored.items()}
    assert set(layout.to_push(state)) == set(stored)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: {**s, "model.extra.weight": torch.zeros(1)}, "unknown key 'model.extra.weight'"),
        (lambda s: {**s, "model.norm.weight": torch.zeros(3)}, "shape mismatch for 'model.norm.weight': got (3,)"),
        (lambda s: {k: v for k, v in s.items() if k != "model.norm.weight"}, "missing key 'model.norm.weight'"),
    ],
)
def test_a_state_that_does_not_fit_raises_naming_the_key(layout_and_state, change, message):
    layout, stored = layout_and_state
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        layout.to_push(change(dict(stored)))
