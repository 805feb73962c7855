"""Writes that fail for real (RLIMIT_FSIZE in a child process: the kernel fails a write past
the limit with EFBIG, as it fails one on a full disk with ENOSPC): a checkpoint save ends in
one line naming the OS error, the checkpoint being written and the last complete one, and
leaves no partial folder; a plot replaces the old file only when the new one is whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("_write_limit_child.py")
REPO = Path(__file__).resolve().parents[2]


def _child(mode: str, folder: Path, limit: int) -> dict:
    r = subprocess.run([sys.executable, str(CHILD), mode, str(folder), str(limit)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr  # not even from DCP's writer threads
    return json.loads(r.stdout)


@pytest.mark.parametrize("mode", ["checkpoint-sync", "checkpoint-async"])
def test_failed_checkpoint_write_is_one_line_and_removes_the_partial_save(tmp_path, mode):
    report = _child(mode, tmp_path, 100_000)
    assert "CheckpointSaveError" in report["mro"], report
    message = report["message"]
    assert "\n" not in message, message
    assert "File too large (EFBIG)" in message and "rollout-000001" in message, message
    assert "the last complete checkpoint is rollout-000000" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "rollout-000000"]


def test_plot_is_replaced_only_by_a_whole_file(tmp_path):
    report = _child("plot", tmp_path, 4_000)
    assert report["raised"] is not None, report
    png = tmp_path / "reward_curve.png"
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG") and data[-8:-4] == b"IEND"  # the first plot, still whole
    assert [p.name for p in tmp_path.iterdir()] == ["reward_curve.png"]  # no temporary file left
