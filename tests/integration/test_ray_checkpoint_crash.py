"""Crash consistency of async checkpoints on the Ray backend: the driver of a real
`heron train` run (2 ranks, async saves every rollout) is SIGKILLed while a save is in flight
(its temporary folder exists: ranks staging or writing, or the driver committing). Afterwards
every committed folder verifies, the newest loads into a trainer, and no committed folder is
partial. (Ray's processes die with the driver: the kernel ends them, heron cannot.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from heron.checkpoint.layout import committed, leftovers
from heron.checkpoint.reader import find_latest, open_checkpoint
from heron.build import trainer_spec
from heron.config.base import to_dict
from heron.config.root import load_config
from heron.trainer.build import build_trainer
from tests.process_helpers import process_tree
from tests.toy_run import toy_run_overrides

DEADLINE_S = 300  # hang guard: saves happen every rollout, within seconds


def _overrides(toy_model_dir, toy_data_path, run_dir):
    return toy_run_overrides(
        toy_model_dir, toy_data_path, run_dir, "rollout.num_rollouts=100000", "checkpoint.interval=1",
        "checkpoint.keep_last=2", "checkpoint.async=true", "checkpoint.hf_export=true", "cluster.backend=ray",
        "train.world_size=2",
    )


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_sigkill_during_an_async_ray_save_leaves_only_complete_checkpoints(toy_model_dir, toy_data_path, tmp_path, trial):
    run_dir = tmp_path / "run"
    folder = run_dir / "checkpoints"
    overrides = _overrides(toy_model_dir, toy_data_path, run_dir)
    proc = subprocess.Popen([sys.executable, "-m", "heron.cli", "train", *overrides],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not (len(committed(folder)) > trial and leftovers(folder)):  # a later save is in flight
            assert proc.poll() is None and time.monotonic() < deadline, "no save in flight before the deadline"
            time.sleep(0.005)
        processes = process_tree(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        _stop(processes if "processes" in locals() else process_tree(proc.pid))
    for path in committed(folder):
        open_checkpoint(path)  # raises if a committed folder is partial or corrupt
    checkpoint = find_latest(folder)
    assert checkpoint is not None and checkpoint.path == committed(folder)[0]
    cfg = load_config(None, [o for o in overrides if not o.startswith(("cluster.", "train.world_size"))])
    trainer = build_trainer(trainer_spec(cfg))
    state = trainer.load_state(checkpoint, to_dict(cfg))  # resharded 2 -> 1, as a resume would
    assert trainer.version == state.version == checkpoint.run_state().trainer.version


def _stop(processes: list[psutil.Process]) -> None:
    """Ends what the killed run left (Ray's processes normally die with it): only these pids."""
    for p in processes:
        try:
            if p.is_running():
                p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=30)
