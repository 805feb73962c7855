"""Ctrl-C and SIGTERM on a real `heron train` subprocess, on both backends: the run stops
cleanly with ONE line naming the rollout and the last committed checkpoint, no traceback,
exit status 128 + signal (130 / 143), and nothing it started is left running (for Ray: the
GCS, raylet, agents and workers of its session).

Ctrl-C is sent as a terminal does, to the whole process group (so Ray's processes get it
too); SIGTERM as `kill` / a job scheduler does, to the driver only. The signal goes once a
checkpoint is committed, i.e. mid-run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from heron.checkpoint.layout import committed
from tests.process_helpers import default_sigint, process_tree, still_running
from tests.toy_run import toy_run_overrides

STARTUP_DEADLINE_S = 300  # hang guards only: a checkpoint normally commits within seconds
EXIT_DEADLINE_S = 120
MESSAGE = re.compile(
    r"heron: interrupted at rollout (\d+); last checkpoint (\S+); rerun the same command to resume"
)


def _start(toy_model_dir, toy_data_path, run_dir: Path, backend: str) -> subprocess.Popen:
    cluster = ["cluster.backend=ray", "train.world_size=2"] if backend == "ray" else []
    args = toy_run_overrides(
        toy_model_dir, toy_data_path, run_dir, "rollout.num_rollouts=100000", "checkpoint.interval=1",
        "checkpoint.keep_last=2", *cluster,
    )
    return subprocess.Popen([sys.executable, "-m", "heron.cli", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_sigint)


def _wait_for_a_checkpoint(proc: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not committed(folder):
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its first checkpoint: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint within {STARTUP_DEADLINE_S}s")
        time.sleep(0.2)


CASES = [  # each Ray run costs ~40-60 s on the shared 2-core machine: one of them in the default tier
    pytest.param("local", signal.SIGINT, id="local-sigint"),
    pytest.param("local", signal.SIGTERM, id="local-sigterm"),
    pytest.param("ray", signal.SIGTERM, id="ray-sigterm"),
    pytest.param("ray", signal.SIGINT, id="ray-sigint", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("backend", "signum"), CASES)
def test_signal_stops_the_run_cleanly_with_one_line(toy_model_dir, tmp_path, backend, signum):
    from heron.toy.addition import write_splits

    write_splits(tmp_path / "data", seed=0, max_digits=2, num_train=64, num_test=8)
    run_dir = tmp_path / "run"
    proc = _start(toy_model_dir, tmp_path / "data" / "train.jsonl", run_dir, backend)
    _wait_for_a_checkpoint(proc, run_dir / "checkpoints")
    processes = process_tree(proc.pid)  # everything the run started, before it can be reparented
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=EXIT_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the run did not stop within {EXIT_DEADLINE_S}s of the signal")
    lines = [line for line in stderr.splitlines() if line.startswith("heron:")]
    assert proc.returncode == 128 + signum, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1 and MESSAGE.fullmatch(lines[0]), stderr[-3000:]
    rollout, checkpoint = MESSAGE.fullmatch(lines[0]).groups()
    newest = committed(run_dir / "checkpoints")[0]
    assert Path(checkpoint) == newest
    assert int(newest.name.split("-")[1]) in (int(rollout) - 1, int(rollout))  # saved after rollout N-1 (or N)
    assert (newest / "manifest.json").is_file()
    if backend == "ray":
        assert len(processes) > 5, processes  # GCS, raylet, agents, 3 workers were seen
    assert still_running(processes[1:]) == []


def test_a_native_abort_prints_the_python_stack_of_every_thread(toy_model_dir, tmp_path):
    """A crash in native code (once seen in CI at a run's exit: "terminate called without an
    active exception", SIGABRT, no other output) leaves heron's faulthandler's stacks on stderr,
    so the next one says where it happened."""
    from heron.toy.addition import write_splits

    write_splits(tmp_path / "data", seed=0, max_digits=2, num_train=64, num_test=8)
    run_dir = tmp_path / "run"
    proc = _start(toy_model_dir, tmp_path / "data" / "train.jsonl", run_dir, "local")
    _wait_for_a_checkpoint(proc, run_dir / "checkpoints")
    proc.send_signal(signal.SIGABRT)
    _, stderr = proc.communicate(timeout=EXIT_DEADLINE_S)
    assert proc.returncode == -signal.SIGABRT, stderr[-3000:]
    assert "Fatal Python error: Aborted" in stderr, stderr[-3000:]
    assert "(most recent call first)" in stderr and "heron" in stderr, stderr[-3000:]
