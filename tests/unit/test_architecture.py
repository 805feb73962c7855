"""Architectural rules enforced by cheap tests rather than reviewer memory.

1. Model and algorithm code knows nothing about devices, offload or distribution: those
   live in one place each (residency, cluster/parallel), never in algo/trainer/records/...
2. Configs import without torch (so the CLI validates a config in milliseconds).
3. The CLI surface is frozen: new knobs go into component configs, not new flags.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "heron"
PURE = ["algo", "trainer", "config", "data", "reward", "records.py", "seeding.py", "rollout/sampling.py"]
FORBIDDEN_MODULES = ("torch.cuda", "torch.distributed", "ray", "torch_memory_saver", "heron.cluster", "heron.parallel")
FORBIDDEN_CALLS = ("cuda", "pin_memory", "untyped_storage", "resize_", "empty_cache")


def _files():
    for entry in PURE:
        path = ROOT / entry
        yield from (sorted(path.rglob("*.py")) if path.is_dir() else [path])


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            if ast.unparse(node).startswith(("torch.cuda", "torch.distributed")):
                found.append(f"{path.name}:{node.lineno} uses {ast.unparse(node)}")
            if node.attr in FORBIDDEN_CALLS:
                found.append(f"{path.name}:{node.lineno} calls .{node.attr}")
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.startswith(FORBIDDEN_MODULES)]
    return found


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_code_has_no_device_or_distribution_logic(path):
    assert _violations(path) == []


def test_the_layering_check_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch.distributed as dist\nx = t.cuda()\n")
    assert len(_violations(bad)) == 2


def test_config_imports_without_torch():
    code = "import sys, heron.config; from heron.config.root import load_config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_surface_is_frozen():
    from heron.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    surface = {
        name: sorted(o for a in p._actions for o in a.option_strings if o not in ("-h", "--help"))
        for name, p in sub.choices.items()
    }
    assert surface == EXPECTED_CLI, "new CLI flags: put new knobs into a component config instead"


EXPECTED_CLI = {
    "train": ["--config"],
    "sft": ["--config"],
    "check": ["--config"],
    "config": [],
    "toy": ["--out"],
    "demo": ["--config", "--run-dir"],
    "ckpt": [],
}
