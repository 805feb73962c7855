"""A disk that fills up during a run: ``heron train`` ends with one line naming the OS error,
the checkpoint being written and the last complete one; no traceback; no partial file left
under a final name (the unfinished checkpoint is removed, the plot is whole or absent); the
same command, once there is space again, resumes from the last complete checkpoint.

The real thing needs a small file system: a tmpfs mounted in a user + mount namespace
(``unshare -Urm``, no root needed where unprivileged user namespaces are enabled). Where that is
unavailable the test says so and skips; the RLIMIT_FSIZE test (writes past the limit fail with
EFBIG, any user, any Linux) always runs the same error path."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NUM_ROLLOUTS = 3


def _overrides(toy_model_dir, addition_data, run_dir: Path, *extra: str) -> list[str]:
    return [
        f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={run_dir}",
        f"rollout.num_rollouts={NUM_ROLLOUTS}", "rollout.batch_size=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=2", "train.micro_batch_size=4",
        "checkpoint.interval=1", "checkpoint.keep_last=0", "tracking.progress=false", "tracking.summary=false",
        *extra,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _error_line(stderr: str) -> str:
    """The run's last stderr line, after checking it is the only error and there is no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert [line for line in lines if "rror" in line] == lines[-1:], stderr
    assert lines[-1].startswith("heron: error: "), stderr
    return lines[-1]


def _checkpoint_bytes(toy_model_dir: Path, folder: Path) -> int:
    """Bytes of one checkpoint of the toy model + AdamW state (what the run writes per save)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from heron.checkpoint.shards import ModuleShards

    from heron.checkpoint.writer import CheckpointWriter

    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    writer = CheckpointWriter(folder, async_save=False, tokenizer=AutoTokenizer.from_pretrained(toy_model_dir))
    writer.save(0, ModuleShards(model, optimizer), {"config": {"padding": "x" * 4096}})
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _namespaces_work(mount_dir: Path) -> str | None:
    """None if a tmpfs can be mounted in a user + mount namespace here, else why not."""
    try:
        r = subprocess.run(["unshare", "-Urm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_dir)],
                           capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "no unshare(1) on this machine"
    return None if r.returncode == 0 else f"unshare -Urm + mount tmpfs failed: {r.stderr.strip()}"


def test_real_enospc_during_a_checkpoint_is_one_line_and_the_rerun_resumes(toy_model_dir, addition_data, tmp_path):
    mount_dir = tmp_path / "small-disk"
    mount_dir.mkdir()
    reason = _namespaces_work(mount_dir)
    if reason:
        pytest.skip(f"real ENOSPC needs a small tmpfs: {reason}; test_file_size_limit_* covers the path")
    checkpoint = _checkpoint_bytes(toy_model_dir, tmp_path / "probe")
    size = int(1.5 * checkpoint) + (512 << 10)  # the first checkpoint fits, the second does not
    run_dir = mount_dir / "run"
    driver = [sys.executable, str(Path(__file__).with_name("_disk_full_driver.py")), str(mount_dir), str(size)]
    r = subprocess.run(["unshare", "-Urm", *driver, *_overrides(toy_model_dir, addition_data, run_dir)],
                       capture_output=True, text=True, env=_env(), timeout=1200)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["first"]["rc"] == 1, report["first"]
    line = _error_line(report["first"]["stderr"])
    assert "No space left on device (ENOSPC)" in line and "rollout-000001" in line, line
    assert "last complete checkpoint is rollout-000000" in line, line
    after = report["after_first"]
    assert after["metrics_ok"] and after["png_ok"], after
    assert not [name for name in after["files"] if ".tmp" in name], after["files"]  # the partial save was removed
    assert report["second"]["rc"] == 0, report["second"]["stderr"]
    assert "resumed from" in report["second"]["stderr"] and "rollout-000000" in report["second"]["stderr"]
    rows = [json.loads(line) for line in report["after_second"]["metrics"].splitlines()]
    assert [row["rollout_id"] for row in rows] == list(range(NUM_ROLLOUTS))


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply


def test_file_size_limit_during_a_checkpoint_is_one_line_and_leaves_no_partial_files(
        toy_model_dir, addition_data, tmp_path):
    checkpoint = _checkpoint_bytes(toy_model_dir, tmp_path / "probe")
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "heron.cli", "train", *_overrides(toy_model_dir, addition_data, run_dir)]
    r = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=600,
                       preexec_fn=_limit_file_size(checkpoint // 4))  # shards exceed it; logs do not
    assert r.returncode == 1, r.stderr
    line = _error_line(r.stderr)
    assert "File too large (EFBIG)" in line and "rollout-000000" in line, line
    assert "no checkpoint of this run is complete yet" in line, line
    folder = run_dir / "checkpoints"
    assert not folder.exists() or list(folder.iterdir()) == [], list(folder.iterdir())
    png = run_dir / "reward_curve.png"
    assert not png.exists() or png.read_bytes()[-8:-4] == b"IEND"
    rerun = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=600)
    assert rerun.returncode == 0, rerun.stderr


def test_a_failing_plot_at_shutdown_does_not_mask_the_error_that_ended_the_run(run_config, monkeypatch, caplog):
    import errno
    import logging

    from heron.loop import train
    from heron.rl_run import RLRun

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "reward_curve.png")

    original_train = RLRun.train

    def broken_train(self, batch):  # rollout 0 is logged (so there is a curve to plot), rollout 1 fails
        if batch.rollout_id == 1:
            raise RuntimeError("the error that ended the run")
        return original_train(self, batch)

    monkeypatch.setattr("heron.tracking.tracker.plot_reward_curve", full_disk)
    monkeypatch.setattr(RLRun, "train", broken_train)
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="the error that ended the run"):
        train(run_config("tracking.plot=true"))
    assert any("reward_curve.png" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("loop_error", ["disk full", "other"])
def test_a_record_lost_to_the_disk_an_async_save_filled_reports_the_save(run_config, monkeypatch, caplog, loop_error):
    """The race the real-ENOSPC test can hit: the async save of rollout 1 fills the disk while the
    loop goes on, and rollout 2's metrics record fails (ENOSPC) in the moment before the save
    itself fails and removes its files. The save is the cause: its error is the one reported (it
    names the checkpoint lost and the last complete one), the record's is logged. A loop error
    that is not the disk (``other``) stays the one reported, the save's is logged. Deterministic:
    the save fails only once the record has."""
    import logging
    import threading

    from heron.checkpoint import dcp_io
    from heron.checkpoint.errors import AsyncSaveError
    from heron.errors import RunError
    from heron.loop import train
    from heron.tracking.metrics_file import JsonlWriter

    record_failed = threading.Event()
    real_save, real_write = dcp_io.save, JsonlWriter.write

    def save(state, folder, *args, **kwargs):
        if "rollout-000001" in str(folder):
            assert record_failed.wait(timeout=600)
            raise OSError(28, "No space left on device", str(folder))
        return real_save(state, folder, *args, **kwargs)

    def write(self, record):
        if record.get("rollout_id") == 2 and "reward/mean" in record:
            record_failed.set()
            if loop_error == "other":
                raise RuntimeError("not the disk")
            raise RunError(f"could not append a record to {self.path}: No space left on device (ENOSPC)") from OSError(
                28, "No space left on device")
        return real_write(self, record)

    monkeypatch.setattr(dcp_io, "save", save)
    monkeypatch.setattr(JsonlWriter, "write", write)
    cfg = run_config("rollout.num_rollouts=3", "checkpoint.interval=1", "checkpoint.keep_last=0",
                     "checkpoint.async=true")
    expected = AsyncSaveError if loop_error == "disk full" else RuntimeError
    with caplog.at_level(logging.WARNING), pytest.raises(expected) as raised:
        train(cfg)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if loop_error == "disk full":
        message = str(raised.value)
        assert "could not write checkpoint rollout-000001" in message and "(ENOSPC)" in message, message
        assert "the last complete checkpoint is rollout-000000" in message, message
        assert any("also, the run stopped on: could not append a record" in w for w in warnings), warnings
    else:
        assert any("also, the last checkpoint save failed: could not write checkpoint rollout-000001" in w
                   for w in warnings), warnings
