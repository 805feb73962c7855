"""`pip install heron` gives a working `heron`: the wheel built from the source declares the core
dependencies, the extras and the entry point and holds the files heron needs at run time; a
fresh venv with the wheel (``--no-deps``) plus only the declared core dependencies runs
``heron --version``, ``heron toy``, ``heron check`` on the packaged demo config and a short
``heron train`` on the embedded local path; a feature whose extra is missing fails in the
pre-flight with one line naming the extra.

The default tier fills the venv by linking the core closure from this environment (seconds,
tests/package_env.py); the slow variant installs the same requirements with pip."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import heron
from tests import package_env

REPO = Path(__file__).resolve().parents[2]
EXTRA_MODULES = ["ray", "psutil", "datasets", "pyarrow", "math_verify", "tensorboard", "wandb", "mlflow", "requests", "peft", "pytest"]
MISSING_EXTRAS = {  # override -> the extra its one-line error must name
    "cluster.backend=ray": "heron[ray]",
    "reward.fn=math": "heron[math]",
    "tracking.tensorboard=true": "heron[tracking]",
    "tracking.wandb.enabled=true": "heron[tracking]",
    "tracking.mlflow.enabled=true": "heron[tracking]",
    "data.path=rows.parquet": "heron[data]",
    "model.lora.enabled=true": "heron[lora]",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return package_env.build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_declares_the_core_the_extras_and_the_entry_point(wheel):
    headers, names, entry_points = package_env.wheel_metadata(wheel)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert headers["Version"] == [heron.__version__]
    core = [str(r) for r in package_env.core_requirements(wheel)]
    assert core == [str(Requirement(r)) for r in project["dependencies"]]
    assert headers["Provides-Extra"] == list(project["optional-dependencies"])
    assert "heron = heron.cli:main" in entry_points.splitlines()
    sources = {str(p.relative_to(REPO)) for p in (REPO / "heron").rglob("*.py")}
    packaged = {n for n in names if n.startswith("heron/")}
    assert packaged == sources | {"heron/toy/demo.yaml"}, "the wheel must hold every module and the demo config, nothing else"


def _run(python: Path, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    heron_cmd = python.parent / "heron"
    return subprocess.run(
        [str(heron_cmd), *args], cwd=cwd, env=package_env.clean_env(), capture_output=True, text=True, check=check,
        timeout=600,  # only a hang reaches it
    )


def check_core_install(python: Path, work: Path) -> None:
    """What a user of the core install does, in ``work`` (outside the checkout)."""
    env = package_env.clean_env()
    probe = "import heron, importlib.util as u, sys; print(heron.__file__); print([m for m in sys.argv[1:] if u.find_spec(m)])"
    where, present = subprocess.check_output([str(python), "-c", probe, *EXTRA_MODULES], cwd=work, env=env, text=True).splitlines()
    assert Path(where).is_relative_to(python.parent.parent), f"heron imported from {where}, not the new venv"
    assert present == "[]", f"the core venv holds optional packages: {present}"

    assert _run(python, "--version", cwd=work).stdout.strip() == f"heron {heron.__version__}"
    _run(python, "toy", "--out", "toy", cwd=work)
    config = Path(where).parent / "toy" / "demo.yaml"  # the packaged demo config
    base = ["--config", str(config), "model.path=toy/toy-model", "data.path=toy/data/train.jsonl", "run.dir=run"]
    checked = _run(python, "check", *base, "eval.path=toy/data/test.jsonl", cwd=work)
    assert checked.stdout.startswith("config ok: 60 rollouts"), checked.stdout

    (work / "rows.parquet").write_bytes(b"")  # never read: the missing extra is found first
    n = len(MISSING_EXTRAS)
    script = f"import sys; from heron.cli import main; print([main([*sys.argv[1:-{n}], o]) for o in sys.argv[-{n}:]])"
    failed = subprocess.run(  # the CLI's main once per override, in one process (one import of torch)
        [str(python), "-c", script, "check", *base, *MISSING_EXTRAS], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert failed.stdout.strip() == str([2] * len(MISSING_EXTRAS)), failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == len(MISSING_EXTRAS), failed.stderr  # one line each, no traceback
    for line, (override, extra) in zip(lines, MISSING_EXTRAS.items()):
        assert line.startswith("heron: error: ") and f"pip install '{extra}'" in line, (override, line)

    small = ["rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=4", "tracking.progress=false"]
    _run(python, "train", *base, *small, "eval.path=toy/data/test.jsonl", "eval.interval=2", "eval.max_prompts=4", cwd=work)
    records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert (work / "run" / "reward_curve.png").stat().st_size > 0


def test_a_venv_with_the_wheel_and_only_the_core_dependencies_runs_heron(wheel, tmp_path):
    python = package_env.new_venv(tmp_path / "venv", with_pip=False)
    linked = package_env.link_core_dependencies(python, package_env.core_requirements(wheel))
    assert "torch" in linked and "ray" not in linked and "datasets" not in linked
    package_env.install_wheel(python, wheel)
    (tmp_path / "work").mkdir()
    check_core_install(python, tmp_path / "work")


@pytest.mark.slow
def test_pip_install_of_the_wheel_and_its_core_dependencies_runs_heron(wheel, tmp_path):
    """The same with a real pip install from the package index (pins from requirements.txt)."""
    python = package_env.new_venv(tmp_path / "venv", with_pip=True)
    package_env.install_wheel(python, wheel)
    package_env.pip_install_core(python, package_env.core_requirements(wheel), tmp_path)
    (tmp_path / "work").mkdir()
    check_core_install(python, tmp_path / "work")
