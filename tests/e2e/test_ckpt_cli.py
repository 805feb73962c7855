"""``heron ckpt list|inspect|export-hf`` on the wrong input: every error is one line on stderr
and exit code 2, nothing is overwritten; ``list`` accepts a run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.cli import main as heron_main


@pytest.fixture(scope="module")
def run_dir(toy_model_dir, tmp_path_factory) -> Path:
    """A run folder with one checkpoint of the toy model (with hf_meta, so it exports)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from heron.checkpoint.shards import ModuleShards

    from heron.checkpoint.writer import CheckpointWriter

    run_dir = tmp_path_factory.mktemp("ckpt_cli") / "run"
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters())
    writer = CheckpointWriter(run_dir / "checkpoints", async_save=False, tokenizer=AutoTokenizer.from_pretrained(toy_model_dir))
    writer.save(0, ModuleShards(model, optimizer), {})
    return run_dir


def _error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("heron: error: ") and "\n" not in err, err
    return err


def test_export_hf_to_an_existing_file_is_one_line_and_leaves_it(run_dir, tmp_path, capsys):
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    assert heron_main(["ckpt", "export-hf", str(run_dir / "checkpoints" / "rollout-000000"), str(taken)]) == 2
    assert f"{taken} already exists" in _error(capsys)
    assert taken.read_text() == "mine"


def test_export_hf_of_a_missing_checkpoint_says_it_does_not_exist(tmp_path, capsys):
    assert heron_main(["ckpt", "export-hf", str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    err = _error(capsys)
    assert "does not exist" in err and "manifest" not in err, err
    assert not (tmp_path / "out").exists()


def test_list_of_a_run_folder_lists_its_checkpoints(run_dir, capsys):
    assert heron_main(["ckpt", "list", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rollout-000000  rollout 0 ") and lines[0].endswith("ok (latest)"), lines


def test_inspect_of_an_invalid_checkpoint_exits_2_in_one_line(run_dir, tmp_path, capsys):
    import shutil

    broken = tmp_path / "rollout-000000"
    shutil.copytree(run_dir / "checkpoints" / "rollout-000000", broken)
    (broken / "state.json").write_text("{}")
    assert heron_main(["ckpt", "inspect", str(broken)]) == 2
    assert "state.json" in _error(capsys)


@pytest.mark.parametrize("argv, expected", [
    (["list", "{tmp}/nope"], "does not exist"),
    (["inspect", "{tmp}/nope"], "does not exist"),
    (["inspect", "{run}"], "is a run folder, not one checkpoint"),
    (["export-hf", "{run}/checkpoints", "{tmp}/out"], "is a checkpoint folder, not one checkpoint"),
    (["export-hf", "{run}/checkpoints/rollout-000000", "{run}"], "already exists"),
])
def test_every_ckpt_error_is_one_line_with_exit_code_2(run_dir, tmp_path, capsys, argv, expected):
    args = [a.format(tmp=tmp_path, run=run_dir) for a in argv]
    assert heron_main(["ckpt", *args]) == 2
    assert expected in _error(capsys)
