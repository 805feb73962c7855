"""One run per folder: a second ``heron train`` (or ``heron sft``) on a folder in use fails at
once, before loading any model, with one line naming the holder; a lock left by a SIGKILLed
run blocks nothing. Real processes: the holder is a real ``heron train`` child."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from heron.cli import main as heron_main

REPO = Path(__file__).resolve().parents[2]
HANG_DEADLINE_S = 180  # only catches a hang; the events below end the waits


def _overrides(model, data, run_dir, *extra) -> list[str]:
    return [
        f"model.path={model}", f"data.path={data}", f"run.dir={run_dir}",
        "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=2",
        "train.micro_batch_size=4", "checkpoint.interval=0",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *extra,
    ]


def _wait_for(condition, child: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + HANG_DEADLINE_S
    while not condition():
        if child is not None and child.poll() is not None:
            raise AssertionError(f"holder exited early: {child.stderr.read() if child.stderr else ''}")
        assert time.monotonic() < deadline, "timed out waiting for the holder"
        time.sleep(0.05)


def _heron_error(err: str) -> str:
    """The one ``heron:`` line of a command's stderr (progress bars of a run that holds the
    folder in this same process may be there too)."""
    lines = [line for line in err.splitlines() if line.startswith("heron:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _no_model_loading(monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("a second run on a folder in use loaded its components")

    monkeypatch.setattr("heron.rl_run.build_components", refuse)


def _start_holder(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "heron.cli", "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_second_run_fails_at_once_naming_the_holder_and_a_sigkilled_holder_blocks_nothing(
        toy_model_dir, toy_data_path, tmp_path, monkeypatch, capsys):
    from heron.config.root import load_config
    from heron.rl_run import RLRun

    run_dir = tmp_path / "run"
    args = _overrides(toy_model_dir, toy_data_path, run_dir, "rollout.num_rollouts=100000")
    holder = _start_holder(args)
    try:
        _wait_for(lambda: (run_dir / "metrics.jsonl").is_file(), holder)  # past loading: it trains
        with monkeypatch.context() as mp:
            _no_model_loading(mp)
            assert heron_main(["train", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("heron: error: run.dir ") and "in use" in err, err
        assert f"pid {holder.pid}" in err and socket.gethostname() in err and "heron.cli train" in err, err
        assert "started " in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    run = RLRun(load_config(None, _overrides(toy_model_dir, toy_data_path, run_dir, "rollout.num_rollouts=1")))
    run.__exit__(None, None, None)  # the kernel released the killed holder's lock
    assert run.start_rollout == 0


def test_checkpoint_dir_outside_run_dir_is_locked_too(toy_model_dir, toy_data_path, tmp_path, monkeypatch, capsys):
    from heron.config.root import load_config
    from heron.rl_run import RLRun

    shared = tmp_path / "shared-checkpoints"
    first = RLRun(load_config(None, _overrides(toy_model_dir, toy_data_path, tmp_path / "a", f"checkpoint.dir={shared}")))
    try:
        _no_model_loading(monkeypatch)
        rc = heron_main(["train", *_overrides(toy_model_dir, toy_data_path, tmp_path / "b", f"checkpoint.dir={shared}")])
        err = _heron_error(capsys.readouterr().err)
        assert rc == 2, err
        assert err.startswith(f"heron: error: checkpoint.dir {shared} is in use") and f"pid {os.getpid()}" in err, err
    finally:
        first.__exit__(None, None, None)


def test_lock_of_a_sigkilled_holder_is_released_by_the_kernel(tmp_path):
    from heron.folder_lock import FolderInUseError, FolderLock

    folder = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from heron.folder_lock import FolderLock\n"
         "FolderLock(sys.argv[1], 'run.dir').acquire(); print('held', flush=True); time.sleep(600)", str(folder)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUseError, match=f"run.dir {folder} is in use .*pid {child.pid} on host ") as info:
            FolderLock(folder, "run.dir").acquire()
        assert "\n" not in str(info.value)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    lock = FolderLock(folder, "run.dir").acquire()  # nothing to clean up by hand
    lock.release()


def test_second_sft_into_the_same_output_fails_at_once(toy_model_dir, toy_data_path, tmp_path, monkeypatch, capsys):
    """The holder is an sft in a thread, held inside its first training step; the second sft
    (same output folder) must fail before training and leave the holder's export intact."""
    from heron.trainer.policy_trainer import PolicyTrainer

    out = tmp_path / "model-out"
    args = [f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"sft.output={out}",
            "sft.num_steps=2", "sft.batch_size=2", f"run.dir={tmp_path / 'run'}"]
    holder_thread_started, release = threading.Event(), threading.Event()
    original_train = PolicyTrainer.train

    def train(self, batch):
        if threading.current_thread().name == "holder":
            holder_thread_started.set()
            release.wait(HANG_DEADLINE_S)
        return original_train(self, batch)

    monkeypatch.setattr(PolicyTrainer, "train", train)
    codes: list[int] = []
    holder = threading.Thread(target=lambda: codes.append(heron_main(["sft", *args])), name="holder")
    holder.start()
    try:
        assert holder_thread_started.wait(HANG_DEADLINE_S)
        rc = heron_main(["sft", *args])
    finally:
        release.set()
        holder.join(HANG_DEADLINE_S)
    err = _heron_error(capsys.readouterr().err)
    assert rc == 2 and f"{out} is in use" in err and f"pid {os.getpid()}" in err, err
    assert codes == [0] and (out / "config.json").is_file()
