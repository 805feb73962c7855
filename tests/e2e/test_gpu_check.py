"""bench/gpu_check.sh up to its CUDA calls: the same script with ``--device cpu --tiny`` on the
tiny toy model, run as on the GPU machine (the system's Python with heron from the source tree
via PYTHONPATH, results under $OUT), so a GPU session finds a script that already works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_script_runs_on_cpu_and_writes_its_results(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PYTHON": sys.executable, "PYTHONPATH": ""}
    done = subprocess.run([str(ROOT / "bench" / "gpu_check.sh"), "--device", "cpu", "--tiny", "--rollouts", "2"],
                          env=env, capture_output=True, text=True, timeout=1800)
    results = (tmp_path / "out" / "gpu_check.txt").read_text()
    assert done.returncode == 0, done.stdout[-3000:] + (tmp_path / "out" / "gpu_check_run.log").read_text()[-3000:]
    assert "gpu_check.py on cpu" in results and "peak device memory allocated" in results
    rows = [line.split() for line in results.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["0", "1"] and all(len(row) == 9 for row in rows)
    assert float(rows[0][3]) > 0 and float(rows[0][6]) > 0  # the trainer and the engine slept and woke
    assert all(float(row[8]) > 0 for row in rows)  # the train stage's model TFLOP/s
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_check.txt", "gpu_check_run.log"]  # the run's files in WORK
