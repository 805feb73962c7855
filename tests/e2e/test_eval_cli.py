"""``heron eval --config C --checkpoint PATH``: a checkpoint of a short real run, and the HF
folder exported from one, evaluated without training give exactly the eval record the run
logged for that checkpoint (same greedy decoding, same eval sampling seeds); records are
appended, never rewritten; a training run's folder, a wrong path and a config without eval
sets are one-line errors that leave every file as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.cli import main as heron_main
from heron.loop import train
from heron.tracking.metrics_file import read_jsonl


@pytest.fixture(scope="module")
def trained(toy_model_dir, addition_data, tmp_path_factory) -> Path:
    """A 2-rollout run with a checkpoint and an eval (two sets, greedy and pass@k) after each rollout."""
    from heron.config.root import load_config

    run_dir = tmp_path_factory.mktemp("eval_cli") / "run"
    train(load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={run_dir}",
        "rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=3", "rollout.max_new_tokens=4",
        "train.micro_batch_size=6", "checkpoint.interval=1", f"eval.path={addition_data['test']}",
        f"eval.sets.hard={addition_data['hard']}", "eval.interval=1", "eval.max_new_tokens=4", "eval.samples=3",
        "eval.temperature=1.5", "tracking.progress=false", "tracking.summary=false", "tracking.plot=false",
    ]))
    return run_dir


def _logged(run_dir: Path, rollout_id: int) -> dict:
    (record,) = [r for r in read_jsonl(run_dir / "eval.jsonl") if r["rollout_id"] == rollout_id]
    return record


def _eval(run_dir: Path, checkpoint: Path, out: Path, *overrides: str) -> int:
    return heron_main(["eval", "--config", str(run_dir / "config.yaml"), "--checkpoint", str(checkpoint), f"run.dir={out}", *overrides])


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("heron: ") and "\n" not in err, err
    return err


def test_a_checkpoint_evaluates_to_what_its_run_logged(trained, tmp_path):
    checkpoint = trained / "checkpoints" / "rollout-000000"
    assert _eval(trained, checkpoint, tmp_path / "out") == 0
    (record,) = read_jsonl(tmp_path / "out" / "eval.jsonl")
    logged = _logged(trained, 0)
    assert {"eval/accuracy", "eval/hard/accuracy", "eval/pass@2", "eval/hard/mean@3"} <= set(logged)
    assert record == {**logged, "checkpoint": str(checkpoint)}  # every metric, the rollout and the policy version
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["eval.jsonl", "heron.lock"]  # the export is gone


def test_an_exported_hf_folder_evaluates_to_what_the_run_logged(trained, tmp_path):
    hf = tmp_path / "hf"
    assert heron_main(["ckpt", "export-hf", str(trained / "checkpoints" / "rollout-000001"), str(hf)]) == 0
    assert _eval(trained, hf, tmp_path / "out") == 0
    (record,) = read_jsonl(tmp_path / "out" / "eval.jsonl")
    logged = {k: v for k, v in _logged(trained, 1).items() if k.startswith("eval/")}
    assert record == {**logged, "checkpoint": str(hf)}  # an HF folder carries no rollout or policy version


def test_records_are_appended_and_earlier_ones_kept(trained, tmp_path):
    out = tmp_path / "out"
    assert _eval(trained, trained / "checkpoints" / "rollout-000001", out) == 0
    first = (out / "eval.jsonl").read_bytes()
    assert _eval(trained, trained / "checkpoints" / "rollout-000000", out, "eval.sets={}", "eval.samples=0") == 0
    assert (out / "eval.jsonl").read_bytes().startswith(first)
    records = read_jsonl(out / "eval.jsonl")
    assert [r["rollout_id"] for r in records] == [1, 0] and "eval/hard/accuracy" not in records[1]
    assert records[1]["eval/accuracy"] == _logged(trained, 0)["eval/accuracy"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_training_run_folder_is_refused_and_left_as_it_was(trained, capsys):
    before = _snapshot(trained)
    assert _eval(trained, trained / "checkpoints" / "rollout-000000", trained) == 2
    assert f"run.dir {trained} holds a training run" in _error(capsys)
    assert _snapshot(trained) == before


@pytest.mark.parametrize("case", ["missing", "not a model", "no eval set"])
def test_wrong_inputs_are_one_line_and_write_nothing(trained, tmp_path, capsys, case):
    checkpoint, overrides = trained / "checkpoints" / "rollout-000000", []
    if case == "missing":
        checkpoint = tmp_path / "nope"
    elif case == "not a model":
        checkpoint = tmp_path / "empty"
        checkpoint.mkdir()
    else:
        overrides = ["eval.path=", "eval.sets={}"]
    assert _eval(trained, checkpoint, tmp_path / "out", *overrides) == 2
    err = _error(capsys)
    expected = {"missing": "is neither a heron checkpoint", "not a model": "is neither a heron checkpoint",
                "no eval set": "heron eval needs an eval set"}[case]
    assert expected in err, err
    assert not (tmp_path / "out").exists()
