"""A tampered checkpoint runs no code. DCP's ``.metadata`` is a pickle, and so are the non-tensor
items of its shards; here they are replaced by pickles whose loading would create a file (and
the manifest is rewritten to match, as an attacker would). ``heron ckpt list|inspect|export-hf``
and resume must refuse them in one line, and the file must never appear."""

from __future__ import annotations

import logging
import pickle
import shutil
from pathlib import Path

import pytest

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.manifest import write_manifest
from heron.cli import main as heron_main
from tests.checkpoint_helpers import model_and_optimizer


OPEN = f"{open.__module__}.open"  # how pickle names open(): io.open


class _CreatesFile:
    """Unpickling this calls ``open(path, "w")``: the file appearing proves code ran."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))

    def __deepcopy__(self, memo):  # DCP's save deep-copies non-tensor items; only unpickling may run it
        return self


def _overrides(toy_model_dir, toy_data_path, run_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"run.dir={run_dir}",
        "rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=2",
        "train.micro_batch_size=4", "checkpoint.interval=1", "checkpoint.keep_last=0",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *extra,
    ]


@pytest.fixture(scope="module")
def finished_run(toy_model_dir, toy_data_path, tmp_path_factory) -> Path:
    from heron.config.root import load_config
    from heron.loop import train

    run_dir = tmp_path_factory.mktemp("tamper") / "run"
    train(load_config(None, _overrides(toy_model_dir, toy_data_path, run_dir)))
    return run_dir


def _evil_metadata(original: bytes, marker: Path) -> bytes:
    metadata = pickle.loads(original)  # the test's own, trusted file
    metadata.planner_data = _CreatesFile(marker)
    return pickle.dumps(metadata)


@pytest.fixture
def tampered(finished_run, tmp_path) -> dict:
    """A copy of the run whose newest checkpoint's .metadata creates ``marker`` when unpickled."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    ckpt = run_dir / "checkpoints" / "rollout-000001"
    meta = ckpt / "dcp" / ".metadata"
    marker = tmp_path / "code-ran"
    probe = tmp_path / "payload-is-live"
    pickle.loads(_evil_metadata(meta.read_bytes(), probe))  # the payload does run code when unpickled
    assert probe.exists()
    meta.write_bytes(_evil_metadata(meta.read_bytes(), marker))
    write_manifest(ckpt, 1)  # sizes and checksums match the tampered files
    return {"run_dir": run_dir, "ckpt": ckpt, "marker": marker}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("heron: error: ") and "\n" not in err, err
    return err


def test_ckpt_list_marks_it_invalid(tampered, capsys):
    assert heron_main(["ckpt", "list", str(tampered["ckpt"].parent)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rollout-000001  INVALID: ") and "dcp/.metadata" in lines[0], lines
    assert f"refers to {OPEN}" in lines[0] and lines[1].startswith("rollout-000000  rollout 0 "), lines
    assert not tampered["marker"].exists()


def test_ckpt_inspect_refuses_it(tampered, capsys):
    assert heron_main(["ckpt", "inspect", str(tampered["ckpt"])]) == 2
    assert "dcp/.metadata" in _one_line_error(capsys)
    assert not tampered["marker"].exists()


def test_ckpt_export_hf_refuses_it(tampered, tmp_path, capsys):
    assert heron_main(["ckpt", "export-hf", str(tampered["ckpt"]), str(tmp_path / "out")]) == 2
    assert "dcp/.metadata" in _one_line_error(capsys)
    assert not tampered["marker"].exists() and not (tmp_path / "out").exists()


def test_resume_skips_it_with_a_warning_and_an_explicit_load_refuses_it(
        tampered, toy_model_dir, toy_data_path, caplog):
    from heron.config.root import load_config
    from heron.rl_run import RLRun

    args = _overrides(toy_model_dir, toy_data_path, tampered["run_dir"], "rollout.num_rollouts=3")
    with caplog.at_level(logging.WARNING, logger="heron.checkpoint"):
        run = RLRun(load_config(None, args))
    run.__exit__(None, None, None)
    assert run.start_rollout == 1  # from rollout-000000
    assert any("rollout-000001" in r.getMessage() and OPEN in r.getMessage() for r in caplog.records)
    with pytest.raises(CheckpointError, match=rf"rollout-000001 .*dcp/\.metadata refers to {OPEN}") as info:
        RLRun(load_config(None, [*args, f"checkpoint.load={tampered['ckpt']}"]))
    assert "\n" not in str(info.value)
    assert not tampered["marker"].exists()


def test_a_pickled_object_in_a_shard_is_refused(tmp_path):
    """The non-tensor items of a shard (optimizer hyperparameters) are pickles too: DCP's own
    planner loads them with ``weights_only=False``; heron's must not run what they hold."""
    import torch.distributed.checkpoint as dcp

    from heron.checkpoint import dcp_io
    from heron.checkpoint.shards import ModuleShards
    from heron.checkpoint.writer import CheckpointWriter

    model, optimizer = model_and_optimizer()
    CheckpointWriter(tmp_path, async_save=False).save(0, ModuleShards(model, optimizer), {})
    ckpt, marker = tmp_path / "rollout-000000", tmp_path / "code-ran"
    state = dcp_io.live_state(model, optimizer)
    state["optimizer"]["param_groups"][0]["lr"] = _CreatesFile(marker)
    shutil.rmtree(ckpt / "dcp")
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(ckpt / "dcp")), no_dist=True)
    write_manifest(ckpt, 0)
    fresh, fresh_optimizer = model_and_optimizer(seed=1)
    with pytest.raises(CheckpointError, match=r"optimizer\.param_groups\.0\.lr") as info:
        dcp_io.load_into(fresh, fresh_optimizer, ckpt)
    assert "\n" not in str(info.value) and not marker.exists()
    assert isinstance(fresh_optimizer.param_groups[0]["lr"], float)
