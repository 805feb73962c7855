"""``data.system_prompt`` (issue 15, item 4) through a real, locally trained tokenizer and its
chat template (the toy tokenizer's ChatML): the rendering, a row's own system turn, and
templates that refuse or drop a system turn. tests/e2e/test_data_hygiene_run.py checks it in
the pre-flight and in the run's rollout and eval encodings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from heron.config.base import ConfigError
from heron.records import Prompt
from heron.rollout.prompt_format import PromptFormatter

SYSTEM = "You add two numbers."


def test_the_system_turn_comes_first_in_the_template(toy_model_dir):
    formatter = PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir), True, SYSTEM)
    assert formatter.text(Prompt(prompt_id=0, text="1+2=", label="3")) == (
        "<|im_start|>system\nYou add two numbers.<|im_end|>\n<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_rows_own_system_turn_is_kept_and_not_doubled(toy_model_dir):
    formatter = PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir), True, SYSTEM)
    own = [{"role": "system", "content": "Answer in words."}, {"role": "user", "content": "1+2="}]
    text = formatter.text(Prompt(prompt_id=0, text="1+2=", label="3", messages=own))
    assert text.count("<|im_start|>system") == 1 and "Answer in words." in text and SYSTEM not in text


def _tokenizer_with_template(toy_model_dir, tmp_path, template: str):
    folder = Path(shutil.copytree(toy_model_dir, tmp_path / "model"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return AutoTokenizer.from_pretrained(folder)


USER_ONLY = "{% for m in messages %}{% if m['role'] == 'user' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}<|im_start|>assistant\n"
REFUSING = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" + USER_ONLY


@pytest.mark.parametrize("template,message", [
    (USER_ONLY, "drops the system turn"),
    (REFUSING, "refuses a system turn (TemplateError: System role not supported)"),
])
def test_a_template_without_system_turns_fails_at_start_up(toy_model_dir, tmp_path, template, message):
    tok = _tokenizer_with_template(toy_model_dir, tmp_path, template)
    PromptFormatter(tok, True)  # without a system prompt the template is fine
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PromptFormatter(tok, True, SYSTEM)
