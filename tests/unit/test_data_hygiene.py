"""Data hygiene (issue 15, item 4) with hand-worked counts: the prompt budget of
``data.max_prompt_tokens`` against the model's context, the start-up fit check, long prompts
dropped or refused, and the counts the run logs as metrics. The toy tokenizer encodes
"1+1=" as 4 tokens (single digits, "+" and "=" are tokens of their own)."""

from __future__ import annotations

import logging

import pytest
from transformers import AutoTokenizer

from heron.data.dataset import PromptDataset
from heron.data.metrics import data_metrics
from heron.data.prompt_lengths import TokenBudget, check_prompt_lengths
from heron.data.rows import DataError
from heron.records import Prompt
from heron.rollout.prompt_format import PromptFormatter

KEY = "rollout.max_new_tokens"


@pytest.mark.parametrize("positions,new,cap,limit", [
    (256, 16, 0, 240),  # no cap: what the context leaves
    (256, 16, 100, 100),  # the cap binds
    (None, 16, 100, 100),  # no max_position_embeddings: the cap alone
    (None, 16, 0, None),  # neither known: not checked
    (256, 200, 100, 56),  # SFT's longest label + eos can leave less than the cap
])
def test_the_prompt_limit_is_the_cap_or_what_the_context_leaves(positions, new, cap, limit):
    assert TokenBudget(positions, new, KEY, cap).limit == limit


def test_the_fit_check_names_both_numbers_and_the_fix():
    TokenBudget(256, 16, KEY, 240).check_fits()  # 240 + 16 = 256: fits exactly
    TokenBudget(None, 16, KEY, 10**6).check_fits()  # unknown context: nothing to check against
    with pytest.raises(DataError) as e:
        TokenBudget(256, 16, KEY, 241).check_fits()
    assert str(e.value) == (
        "data.max_prompt_tokens=241 + rollout.max_new_tokens=16 = 257 tokens do not fit the model's 256 positions "
        "(max_position_embeddings in model.path's config.json); set data.max_prompt_tokens<=240 or lower rollout.max_new_tokens"
    )
    with pytest.raises(DataError, match="rollout.max_new_tokens=256 leaves no room for a prompt"):
        TokenBudget(256, 256, KEY, 0).check_fits()


def _dataset(texts: list[str]) -> PromptDataset:
    prompts = [Prompt(prompt_id=i, text=t, label="2") for i, t in enumerate(texts)]
    return PromptDataset("d.jsonl", prompts, ["d.jsonl:99: invalid JSON"], [f"d.jsonl:{i + 1}" for i in range(len(texts))])


@pytest.fixture
def formatter(toy_model_dir):
    return PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir))


def test_prompts_over_the_cap_are_dropped_counted_and_logged_once(formatter, caplog):
    texts = ["1+1=" * k for k in range(1, 9)]  # 4, 8, ..., 32 tokens
    with caplog.at_level(logging.WARNING, logger="heron.data"):
        checked = check_prompt_lengths(_dataset(texts), formatter, TokenBudget(256, 16, KEY, 20), "error", "drop").dataset
    assert [p.prompt_id for p in checked.prompts] == [0, 1, 2, 3, 4]  # 4..20 tokens kept; 24, 28, 32 dropped
    assert checked.long_prompts == [
        f"d.jsonl:{row}: the prompt is {n} tokens, over data.max_prompt_tokens=20; shorten it or raise data.max_prompt_tokens"
        for row, n in [(6, 24), (7, 28), (8, 32)]
    ]
    assert checked.bad_rows == ["d.jsonl:99: invalid JSON"]  # the loader's bad row, untouched
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert lines == [
        "d.jsonl: dropped 3 of 8 prompts longer than 20 tokens (data.on_long_prompt=drop; metric "
        "data/dropped_long_prompts), e.g. prompt_id 5 at d.jsonl:6: 24 tokens"
    ]


def test_on_long_prompt_error_names_the_first_long_row_and_the_fix(formatter):
    texts = ["1+1="] * 3 + ["1+1=" * 6, "1+1=" * 9]
    with pytest.raises(DataError) as e:
        check_prompt_lengths(_dataset(texts), formatter, TokenBudget(256, 16, KEY, 20), "skip", "error")
    assert str(e.value) == (
        "d.jsonl:4: the prompt is 24 tokens, over data.max_prompt_tokens=20; shorten it or raise "
        "data.max_prompt_tokens (or set data.on_long_prompt=drop)"
    )


def test_the_context_still_binds_below_a_cap_sft_cannot_fit(formatter):
    """SFT's budget: a 56-token room under a cap of 100; a 60-token prompt is past the context."""
    checked = check_prompt_lengths(
        _dataset(["1+1=" * 15, "1+1="]), formatter, TokenBudget(256, 200, "the longest label + eos", 100), "error", "drop"
    ).dataset
    assert [p.prompt_id for p in checked.prompts] == [1]
    assert "needs 260 positions but the model has 256" in checked.long_prompts[0]


def test_data_metrics_count_each_dataset():
    train = PromptDataset("t", [], ["a", "b", "c"], [], long_prompts=["x", "y"])
    hard = PromptDataset("h", [], ["d"], [])
    held_out = PromptDataset("e", [], [], [], long_prompts=["z"])
    assert data_metrics(train, {"": held_out, "hard": hard}) == {
        "data/bad_rows": 3.0, "data/dropped_long_prompts": 2.0,
        "data/eval/bad_rows": 0.0, "data/eval/dropped_long_prompts": 1.0,
        "data/eval/hard/bad_rows": 1.0, "data/eval/hard/dropped_long_prompts": 0.0,
    }
    assert data_metrics(None, {}) == {}  # hooks.data_source: the pre-flight saw no training rows


@pytest.mark.parametrize("override,message", [
    ("data.system_prompt=Be brief.", "data.system_prompt is a chat turn: set data.apply_chat_template=true too"),
    ("data.max_prompt_tokens=-1", "data.max_prompt_tokens must be >= 0 (0 = the model's context), got -1"),
    ("data.on_long_prompt=truncate", "config key 'data.on_long_prompt' must be one of ['error', 'drop'], got 'truncate'"),
    ("data.max_prompt_token=5", "unknown config key 'data.max_prompt_token'; did you mean 'data.max_prompt_tokens'?"),
])
def test_data_hygiene_keys_fail_in_one_line(override, message):
    from heron.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.path=m", "data.path=d.jsonl", override])
    assert message in str(e.value) and "\n" not in str(e.value)
