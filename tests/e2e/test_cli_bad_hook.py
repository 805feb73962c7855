"""Acceptance: `heron train` with a hook of the wrong signature exits non-zero within
seconds with the one-line error, and writes nothing into run.dir."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BAD = ROOT / "tests" / "fixtures" / "hooks" / "invalid.py"


def _heron(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "heron.cli", *args], capture_output=True, text=True, env=env, timeout=120)
    return proc, time.perf_counter() - start


@pytest.mark.parametrize(
    "override, message",
    [
        (f"hooks.policy_loss={BAD}:policy_loss_no_kw", "hooks.policy_loss: hook"),
        (f"reward.fn={BAD}:reward_one_param", "reward.fn (reward.scope=sample): hook"),
        (f"hooks.rollout_data_postprocess={BAD}:async_postprocess", "it is async"),
        (f"hooks.data_source={BAD}:SourceMissingMethod", "it has no method add_samples()"),
        (f"hooks.generate={BAD}:nothing", "has no attribute 'nothing'"),
    ],
)
def test_wrong_hook_fails_fast_with_one_line_and_writes_nothing(toy_model_dir, addition_data, tmp_path, override, message):
    run_dir = tmp_path / "run"
    proc, seconds = _heron("train", f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={run_dir}", override)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heron: config error: ") and message in lines[0], proc.stderr
    assert seconds < 15, f"took {seconds:.1f}s"  # ~2 s measured; generous for a loaded 2-core machine
    assert not run_dir.exists() or not any(run_dir.iterdir())


def test_bad_data_row_fails_fast_with_file_and_line(toy_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2="}\n')
    proc, _ = _heron("train", f"model.path={toy_model_dir}", f"data.path={data}", f"run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    assert f"{data}:2: missing key 'label'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_check_command_checks_hooks(toy_model_dir, addition_data):
    proc, _ = _heron("check", f"model.path={toy_model_dir}", f"data.path={addition_data['train']}",
                     f"hooks.advantage={BAD}:reward_three_required")
    assert proc.returncode == 2 and "hooks.advantage: hook" in proc.stderr and "requires 3 positional" in proc.stderr
    ok, _ = _heron("check", f"model.path={toy_model_dir}", f"data.path={addition_data['train']}",
                   f"hooks.advantage={ROOT}/tests/fixtures/hooks/valid.py:advantage")
    assert ok.returncode == 0, ok.stderr
