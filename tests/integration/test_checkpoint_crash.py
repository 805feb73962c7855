"""Crash consistency: a process saving checkpoints back to back is SIGKILLed at a random
moment; afterwards every folder under a committed name verifies, ``latest`` names one of them,
and what ``checkpoint.load: auto`` would pick (``find_latest``) loads one whole save -- never a
partial or mixed one. A few trials in the default tier, many in the slow tier.

SIGKILL tests the process-crash guarantee; the fsyncs extend it to power loss, which a test
cannot produce."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from heron.checkpoint import dcp_io
from heron.checkpoint.layout import committed, leftovers, read_latest
from heron.checkpoint.reader import find_latest, open_checkpoint
from heron.checkpoint.shards import ModuleShards
from heron.checkpoint.writer import CheckpointWriter
from tests.soak import trials

CHILD = Path(__file__).with_name("_crash_saver.py")
REPO = Path(__file__).resolve().parents[2]


def _kill_during_saves(folder: Path, mode: str, delay_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, str(CHILD), str(folder), mode], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(delay_s)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def _check_consistent(folder: Path) -> bool:
    """Asserts the invariants; returns whether the kill left an unfinished save behind."""
    names = [p.name for p in committed(folder)]
    for path in committed(folder):
        open_checkpoint(path)  # raises if any committed folder is partial or corrupt
    latest = read_latest(folder)
    assert latest is None or latest in names
    unfinished = bool(leftovers(folder))
    ckpt = find_latest(folder)
    if ckpt is None:
        assert names == []
        return unfinished
    assert ckpt.name == names[0] and ckpt.state["value"] == ckpt.rollout_id
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    optimizer = torch.optim.AdamW(model.parameters())
    dcp_io.load_into(model, optimizer, ckpt.path)
    value = float(ckpt.rollout_id)
    for p in model.parameters():
        assert bool((p == value).all()) and bool((optimizer.state[p]["exp_avg"] == value).all())
    # a resumed run's writer clears the leftovers and commits the next checkpoint
    writer = CheckpointWriter(folder, async_save=False, keep_last=2)
    writer.save(ckpt.rollout_id + 1, ModuleShards(model, optimizer), {"value": ckpt.rollout_id + 1})
    assert leftovers(folder) == [] and find_latest(folder).rollout_id == ckpt.rollout_id + 1
    return unfinished


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_during_saves_leaves_only_complete_checkpoints(tmp_path, mode):
    rng = random.Random(f"default-{mode}")
    for trial in range(1):
        folder = tmp_path / f"trial{trial}"
        _kill_during_saves(folder, mode, rng.uniform(0.05, 0.6))
        _check_consistent(folder)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_during_saves_many_trials(tmp_path, mode):
    """25 kills per mode in the slow tier, 50 in `make soak`."""
    rng = random.Random(f"slow-{mode}")
    num_trials = trials("crash_saver", slow=25, soak=50)
    num_unfinished = 0
    for trial in range(num_trials):
        folder = tmp_path / f"trial{trial}"
        _kill_during_saves(folder, mode, rng.uniform(0.0, 1.5))
        num_unfinished += _check_consistent(folder)
    print(f"{mode}: {num_unfinished}/{num_trials} kills landed inside a save")
    assert num_unfinished >= num_trials // 5, f"only {num_unfinished}/{num_trials} kills landed inside a save; the test lost its point"
