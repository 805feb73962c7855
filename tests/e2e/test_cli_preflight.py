"""Bad inputs through the real command line (issue 9, items 2.6, 2.7, 2.10, 2.13, 2.14, 2.15):
``heron check`` finds what ``heron train`` would trip over, and both say it in one line,
exit 2, no traceback, before any model loads and before anything is written. One real
subprocess per kind of defect (each pays the transformers import); the full matrix of
broken inputs runs in-process in test_preflight.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERON = [sys.executable, "-m", "heron.cli"]


def _heron(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HERON, *args], capture_output=True, text=True, timeout=300)


def _assert_one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, r.stderr[-2000:]
    assert line.startswith(("heron: error: ", "heron: config error: ")), line
    for fragment in fragments:
        assert fragment in line, line
    return line


@pytest.fixture
def base(toy_model_dir, addition_data, tmp_path):
    return [
        f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={tmp_path / 'run'}",
        "rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4",
        "train.micro_batch_size=4", "eval.interval=0", "checkpoint.interval=1",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false",
    ]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_check_passes_a_good_config_and_creates_nothing(base, tmp_path):
    r = _heron("check", *base)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("config ok") and "256 positions" in r.stdout and "writable" in r.stdout
    assert not (tmp_path / "run").exists()


def test_an_unwritable_checkpoint_dir_stops_train_before_the_model_loads(base, tmp_path):
    """It used to surface at the first save, after checkpoint.interval rollouts, as a traceback."""
    (tmp_path / "a-file").write_text("x")
    ckpt = f"checkpoint.dir={tmp_path / 'a-file' / 'ckpt'}"
    _assert_one_line_error(_heron("train", *base, ckpt), "checkpoint.dir", "is a file")
    assert not (tmp_path / "run").exists()  # no rollout ran, nothing was written


def test_an_empty_prompt_stops_train_with_file_and_line(base, tmp_path):
    """It used to crash rollout 0 ("prompt_tokens is empty")."""
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "1+2=", "label": "3"}, {"prompt": "", "label": "1"}])
    _assert_one_line_error(_heron("train", *base, f"data.path={data}"), f"{data}:2:", "empty")
    assert not (tmp_path / "run").exists()


def test_a_prompt_longer_than_the_context_stops_check(base, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [{"prompt": "1+2=", "label": "3"}, {"prompt": "1+1=" * 300, "label": "2"}])
    _assert_one_line_error(_heron("check", *base, f"data.path={data}"), f"{data}:2:", "1200 tokens", "256")


def test_a_model_folder_without_tokenizer_stops_train_in_one_line(base, toy_model_dir, tmp_path):
    """It used to say "prompt_tokens is empty" in rollout 0; every other broken folder is
    covered in-process by test_preflight.py."""
    model = Path(shutil.copytree(toy_model_dir, tmp_path / "model"))
    for f in model.glob("tokenizer*"):
        f.unlink()
    _assert_one_line_error(_heron("train", *base, f"model.path={model}"), f"model.path '{model}'", "has no usable tokenizer")


@pytest.mark.parametrize("override,fragment", [
    ("train.lr=inf", "'train.lr' must be a finite number"),
    ("rollout.temperature=inf", "'rollout.temperature' must be a finite number"),
    ("reward.failure_value=nan", "'reward.failure_value' must be a finite number"),
    ("rollout.samples_per_prompt=1", "rollout.samples_per_prompt=1 gives every advantage 0"),
])
def test_values_that_used_to_train_garbage_are_config_errors(base, tmp_path, override, fragment):
    _assert_one_line_error(_heron("train", *base, override), fragment)
    assert not (tmp_path / "run").exists()


def test_a_remote_reward_must_speak_http(base):
    _assert_one_line_error(_heron("check", *base, "reward.fn=remote", "reward.remote.url=ftp://127.0.0.1/score"),
                           "reward.remote.url must be an http:// or https:// address")
