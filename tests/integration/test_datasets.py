"""Prompt datasets from real files: JSONL, Parquet and HF datasets folders, key mapping,
metadata, chat templates, bad rows (error with file:line, or skip and count), and an exact
resume of the data cursor through a JSON round trip of the data source's state."""

import json
import logging
from dataclasses import replace

import pytest

from heron.config.data import DataConfig
from heron.data.dataset import load_dataset
from heron.data.rows import DataError
from heron.data.source import PromptDataSource
from heron.records import Prompt

ROWS = [
    {"question": "1+1=", "answer": 2, "source": "a", "level": 1},
    {"question": "2+3=", "answer": "5", "source": "b", "level": 2},
    {"question": "9+9=", "answer": 18, "source": "c", "level": 3},
]
CFG = DataConfig(prompt_key="question", label_key="answer")


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _expected() -> list[Prompt]:
    return [
        Prompt(prompt_id=i, text=r["question"], label=str(r["answer"]), metadata={"source": r["source"], "level": r["level"]})
        for i, r in enumerate(ROWS)
    ]


def test_jsonl_parquet_and_hf_folders_give_the_same_prompts(tmp_path):
    import datasets

    # parquet and HF need one type per column
    rows = [{**r, "answer": str(r["answer"])} for r in ROWS]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "hf_dict"))
    paths = [
        _write_jsonl(tmp_path / "d.jsonl", ROWS), _write_parquet(tmp_path / "d.parquet", rows),
        tmp_path / "hf", tmp_path / "hf_dict",
    ]
    for path in paths:
        assert load_dataset(path, CFG).prompts == _expected(), path


def test_hf_dict_with_missing_split_names_the_splits(tmp_path):
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "hf"))
    with pytest.raises(DataError, match=r"has splits \['test'\], not 'train'; set data.split"):
        load_dataset(tmp_path / "hf", CFG)
    assert len(load_dataset(tmp_path / "hf", replace(CFG, split="test")).prompts) == 1


def test_metadata_keys_select_the_passthrough(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", ROWS)
    prompts = load_dataset(path, replace(CFG, metadata_keys=["level"])).prompts
    assert [p.metadata for p in prompts] == [{"level": 1}, {"level": 2}, {"level": 3}]


def test_no_label_key_gives_empty_labels(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", ROWS)
    assert {p.label for p in load_dataset(path, replace(CFG, label_key="")).prompts} == {""}


BAD_LINES = [
    json.dumps({"question": "1+1=", "answer": "2"}),
    "{not json",
    json.dumps({"question": "2+2="}),
    json.dumps({"question": 7, "answer": "7"}),
    "",
    json.dumps({"question": "3+3=", "answer": None}),
    json.dumps(["a", "list"]),
    json.dumps({"question": "4+4=", "answer": "8"}),
]


@pytest.mark.parametrize(
    "bad, reason",
    [
        (BAD_LINES[1], "invalid JSON"),
        (BAD_LINES[2], "missing key 'answer'"),
        (BAD_LINES[3], r"'question' must be a string or a list of \{role, content\} messages, got int"),
        (BAD_LINES[5], "'answer' must be a string or number, got NoneType"),
        (BAD_LINES[6], "row must be an object with keys, got list"),
    ],
)
def test_bad_row_is_reported_with_file_and_line(tmp_path, bad, reason):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([BAD_LINES[0], "", BAD_LINES[0], bad, BAD_LINES[0]]) + "\n")
    with pytest.raises(DataError, match=rf"d.jsonl:4: {reason}.*data.on_bad_row=skip"):
        load_dataset(path, CFG)


def test_skip_counts_and_logs_bad_rows_and_keeps_ids_stable(tmp_path, caplog):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(BAD_LINES) + "\n")
    with caplog.at_level(logging.WARNING, logger="heron.data"):
        data = load_dataset(path, replace(CFG, on_bad_row="skip"))
    assert [(p.prompt_id, p.text) for p in data.prompts] == [(0, "1+1="), (6, "4+4=")]  # ids = row index
    assert len(data.bad_rows) == 5
    assert "skipped 5 bad rows of 7" in caplog.text
    assert f"{path}:2: invalid JSON" in caplog.text


def test_parquet_bad_row_names_the_row(tmp_path):
    path = _write_parquet(tmp_path / "d.parquet", [{"question": "a", "answer": "1"}, {"question": "b", "answer": None}])
    with pytest.raises(DataError, match=r"d.parquet row 2: 'answer' must be a string or number"):
        load_dataset(path, CFG)


def test_chat_messages_need_the_chat_template_flag(tmp_path):
    messages = [{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="}]
    path = _write_jsonl(tmp_path / "d.jsonl", [{"question": messages, "answer": "2"}])
    with pytest.raises(DataError, match="set data.apply_chat_template=true"):
        load_dataset(path, CFG)
    (prompt,) = load_dataset(path, replace(CFG, apply_chat_template=True)).prompts
    assert prompt.text == "1+1=" and prompt.messages == messages


def test_chat_template_encoding_uses_the_tokenizer_template(toy_model_dir):
    from transformers import AutoTokenizer

    from heron.rollout.prompt_format import PromptFormatter

    tok = AutoTokenizer.from_pretrained(toy_model_dir)
    plain, chat = PromptFormatter(tok), PromptFormatter(tok, apply_chat_template=True)
    prompt = Prompt(prompt_id=0, text="12+3=", label="15")
    assert tok.decode(plain.encode(prompt)) == "12+3="
    assert tok.decode(chat.encode(prompt)) == "<|im_start|>user\n12+3=<|im_end|>\n<|im_start|>assistant\n"
    messages = [{"role": "system", "content": "add"}, {"role": "user", "content": "12+3="}]
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(chat.encode(replace(prompt, messages=messages))) == expected


def test_data_source_resumes_exactly_from_a_json_round_trip(tmp_path):
    rows = [{"question": f"{i}+0=", "answer": str(i)} for i in range(7)]
    cfg = replace(CFG, path=str(_write_jsonl(tmp_path / "d.jsonl", rows)))
    straight = PromptDataSource(cfg, seed=3)
    first = [straight.get_samples(3) for _ in range(2)]
    straight.add_samples(first[0][:1])  # a buffered prompt must survive the resume too
    state = json.loads(json.dumps(straight.state_dict()))
    rest = [straight.get_samples(3) for _ in range(5)]  # crosses two epoch boundaries

    resumed = PromptDataSource(cfg, seed=3)
    resumed.load_state_dict(state)
    assert [resumed.get_samples(3) for _ in range(5)] == rest
    assert rest[0][0] == first[0][0]  # the given-back prompt comes first
    walk = [p.prompt_id for p in first[0] + first[1] + rest[0][1:]]
    assert sorted(walk[:7]) == list(range(7))  # one epoch = every row once


def test_epochs_are_reshuffled_and_seeded(tmp_path):
    rows = [{"question": f"{i}+0=", "answer": str(i)} for i in range(20)]
    cfg = replace(CFG, path=str(_write_jsonl(tmp_path / "d.jsonl", rows)))
    a, b, c = PromptDataSource(cfg, 0), PromptDataSource(cfg, 0), PromptDataSource(cfg, 1)
    ids = lambda s: [p.prompt_id for p in s.get_samples(20)]  # noqa: E731
    e0a, e1a = ids(a), ids(a)
    assert e0a == ids(b) and e0a != ids(c) and e0a != e1a and sorted(e1a) == list(range(20))
