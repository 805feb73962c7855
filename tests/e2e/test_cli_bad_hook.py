"""Acceptance: `heron train` with a hook of the wrong signature exits non-zero before any
compute (no model class was even imported) with the one-line error, and writes nothing into
run.dir. "Before any compute" is checked by what the process imported, not by a wall-clock
bound (tests/tolerance.py, rule 5)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tolerance import HANG_S

ROOT = Path(__file__).resolve().parent.parent.parent
BAD = ROOT / "tests" / "fixtures" / "hooks" / "invalid.py"
MODEL_MODULE = "transformers.models.qwen3.modeling_qwen3"  # imported by whatever builds the toy model
# `heron` in a child that writes the names of the modules it imported when it exits
CLI = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['MODULES_OUT'], 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from heron.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _heron(*args: str, modules_out: Path | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Runs the CLI; returns the process and the modules it had imported when it exited."""
    modules_out = modules_out or Path(os.devnull)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MODULES_OUT": str(modules_out)}
    proc = subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env, timeout=HANG_S)
    modules = set(modules_out.read_text().split()) if modules_out.is_file() else set()
    return proc, modules


@pytest.mark.portability
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
    proc, modules = _heron("train", f"model.path={toy_model_dir}", f"data.path={addition_data['train']}", f"run.dir={run_dir}",
                           override, modules_out=tmp_path / "modules.txt")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("heron: config error: ") and message in lines[0], proc.stderr
    assert "heron.cli" in modules and MODEL_MODULE not in modules  # failed before building a model
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
