"""The command line as a user runs it: real subprocesses, real files."""

import subprocess
import sys

from tests.tolerance import HANG_S

HERON = [sys.executable, "-m", "heron.cli"]


def _run(*args, cwd=None):
    return subprocess.run([*HERON, *args], capture_output=True, text=True, cwd=cwd, timeout=HANG_S)


def test_bad_config_key_exits_2_with_one_line_before_anything_runs(tmp_path):
    run_dir = tmp_path / "run"
    r = _run("train", f"run.dir={run_dir}", "model.path=x", "data.path=y", "rollout.batchsize=2")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "heron: config error: unknown config key 'rollout.batchsize'; did you mean 'rollout.batch_size'?"
    )
    assert not run_dir.exists()


def test_missing_model_folder_is_named(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    r = _run("check", f"model.path={tmp_path / 'nope'}", f"data.path={data}")
    assert r.returncode == 2
    assert "is not an HF model folder" in r.stderr


def test_check_accepts_a_valid_config(tmp_path, toy_model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    r = _run("check", f"model.path={toy_model_dir}", f"data.path={data}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("config ok")


def test_config_command_lists_documented_keys():
    r = _run("config")
    assert r.returncode == 0
    assert "rollout.samples_per_prompt" in r.stdout and "GRPO group size" in r.stdout


def test_sft_refuses_to_overwrite_an_existing_output(tmp_path, toy_model_dir):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    out = tmp_path / "sft-model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = _run("sft", f"model.path={toy_model_dir}", f"data.path={data}", f"sft.output={out}", "sft.num_steps=1")
    assert r.returncode == 2
    assert "already exists" in r.stderr and "\n" not in r.stderr.strip()
    assert (out / "keep.txt").read_text() == "mine"
