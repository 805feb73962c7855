"""Data hygiene in real runs (issue 15, item 4): a toy run whose data has some malformed and
some over-long rows trains on the rest and reports the counts as metrics, with the long ones
named once in the log; the start-up check of ``data.max_prompt_tokens + max_new_tokens``
against the model's context through the real CLI; ``data.system_prompt`` in the pre-flight's
token counts and in the run's rollout and eval encodings."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from heron.build import build_components
from heron.errors import UserError
from heron.loop import train
from heron.preflight import preflight
from heron.records import Prompt
from heron.rollout.prompt_format import PromptFormatter
from heron.toy.addition import make_prompts, write_jsonl
from tests.tolerance import HANG_S

SYSTEM = "You add two numbers."
BAD_ROWS = [  # each one a bad row: bad JSON, a missing key, a wrong prompt type, a wrong label type
    "{not json",
    json.dumps({"prompt": "1+1="}),
    json.dumps({"prompt": ["1+1="], "label": "2"}),
    json.dumps({"prompt": "1+1=", "label": [2]}),
]


def _data(path, num_good: int, bad: list[str], long_prompts: list[str]):
    """``num_good`` addition rows, then ``bad`` lines, then a 40-token row ("1+1=" is 4
    tokens) and ``long_prompts``."""
    write_jsonl(make_prompts(num_good, seed=0, max_digits=2), path)
    with path.open("a") as f:
        for line in bad:
            f.write(line + "\n")
        for text in ["1+1=" * 10, *long_prompts]:
            f.write(json.dumps({"prompt": text, "label": "2"}) + "\n")
    return path


def test_a_run_with_bad_and_long_rows_reports_their_counts(run_config, tmp_path, caplog):
    train_path = _data(tmp_path / "train.jsonl", 20, BAD_ROWS, ["1+1=" * 11, "1+1=" * 20])  # 44 and 80 tokens
    eval_path = _data(tmp_path / "test.jsonl", 6, BAD_ROWS[:1], ["1+1=" * 12])
    cfg = run_config(
        f"data.path={train_path}", f"eval.path={eval_path}", "eval.interval=2", "data.max_prompt_tokens=40",
        "data.on_bad_row=skip", "data.on_long_prompt=drop",
    )
    with caplog.at_level(logging.WARNING, logger="heron.data"):
        records = train(cfg)
    expected = {
        "data/bad_rows": 4.0, "data/dropped_long_prompts": 2.0,  # the 40-token row is kept: the cap is inclusive
        "data/eval/bad_rows": 1.0, "data/eval/dropped_long_prompts": 1.0,
    }
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(records) == len(logged) == 2
    for record in records + logged:
        assert {k: record[k] for k in expected} == expected
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped == [  # rows 0-19 good, 20-23 bad, 24 the 40-token one: the first long one is row 25, line 26
        f"{train_path}: dropped 2 of 23 prompts longer than 40 tokens (data.on_long_prompt=drop; metric "
        f"data/dropped_long_prompts), e.g. prompt_id 25 at {train_path}:26: 44 tokens",
        f"{eval_path}: dropped 1 of 8 prompts longer than 40 tokens (data.on_long_prompt=drop; metric "
        f"data/dropped_long_prompts), e.g. prompt_id 8 at {eval_path}:9: 48 tokens",
    ]


def _heron(*args):
    return subprocess.run([sys.executable, "-m", "heron.cli", *args], capture_output=True, text=True, timeout=HANG_S)


def test_a_prompt_cap_the_model_cannot_hold_fails_before_the_data_is_read(toy_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("{not json\n")  # would fail too, if the data were read first
    base = ["check", f"model.path={toy_model_dir}", f"data.path={data}", f"run.dir={tmp_path / 'run'}"]
    r = _heron(*base, "data.max_prompt_tokens=250", "rollout.max_new_tokens=16")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.strip() == (
        "heron: config error: data.max_prompt_tokens=250 + rollout.max_new_tokens=16 = 266 tokens do not fit the model's "
        "256 positions (max_position_embeddings in model.path's config.json); set data.max_prompt_tokens<=240 or lower "
        "rollout.max_new_tokens"
    )
    r = _heron(*base, "data.max_prompt_tokens=240", "rollout.max_new_tokens=16", f"eval.path={data}", "eval.max_new_tokens=20")
    assert r.returncode == 2 and "data.max_prompt_tokens=240 + eval.max_new_tokens=20 = 260 tokens" in r.stderr
    r = _heron(*base, "data.max_prompt_tokens=240", "rollout.max_new_tokens=16")
    assert r.returncode == 2 and f"{data}:1: invalid JSON" in r.stderr  # the budget fits: now the data is read


def test_the_system_prompt_counts_toward_max_prompt_tokens(run_config, toy_model_dir, tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl([Prompt(prompt_id=0, text="1+2=", label="3")], path)
    plain = PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir), True)
    num_tokens = len(plain.encode(Prompt(prompt_id=0, text="1+2=", label="3")))
    chat = [f"data.path={path}", "data.apply_chat_template=true", f"data.max_prompt_tokens={num_tokens}"]
    preflight(run_config(*chat))  # the templated prompt alone fits exactly
    with pytest.raises(UserError, match=rf"{path}:1: the prompt is \d+ tokens, over data.max_prompt_tokens={num_tokens}"):
        preflight(run_config(*chat, f"data.system_prompt={SYSTEM}"))


def test_training_and_eval_prompts_are_encoded_the_same_way(run_config, addition_data):
    cfg = run_config(
        "data.apply_chat_template=true", f"data.system_prompt={SYSTEM}", f"eval.path={addition_data['test']}", "eval.interval=1",
    )
    components = build_components(cfg)
    try:
        seen = []
        generate = components.engine.generate
        components.engine.generate = lambda requests: seen.extend(requests) or generate(requests)
        components.evaluator.evaluate(components.engine)
        num_eval = len(seen)
        components.generator.generate(0, components.sampler.get_samples(2))
    finally:
        components.close()
    texts = [components.tokenizer.decode(r.prompt_tokens) for r in seen]
    assert num_eval == 6 and len(texts) == 6 + 2 * 3  # 6 eval prompts; 2 prompts x 3 samples
    expected_head = "<|im_start|>system\nYou add two numbers.<|im_end|>\n<|im_start|>user\n"
    assert all(t.startswith(expected_head) and t.endswith("<|im_end|>\n<|im_start|>assistant\n") for t in texts), texts
