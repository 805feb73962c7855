"""Every torch name the code that runs on a GPU machine spells out (``torch.cuda.Event``,
``from torch.distributed.fsdp import fully_shard``, ``dist.ProcessGroupNCCL.Options``) exists in
the installed torch.

Why: the CUDA-only paths (NCCL groups, CUDA events and memory stats, the GPU tier) never run on
the CPU machine, and the GPU machines' image has torch 2.11, older than the 2.13 `make` pins. A
name 2.11 lacks would first fail there, in a 15-minute lease. `make test-floor` runs this test on
torch 2.11 (PyPI's CUDA build), where every name must resolve; on a build without CUDA only the
names in ``CUDA_BUILD_ONLY`` may be missing. It reads names, not calls: a method on a runtime
object (``tensor.foo()``) or a keyword argument is not checked."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
# What bench/gpu_check.sh runs on the GPU machine: heron, the GPU tier and its helpers, the bench.
SOURCES = ("heron", "tests/gpu", "tests/reference_decoder.py", "tests/tolerance.py", "bench/gpu_check.py")
# Present only in torch builds with CUDA (a CPU wheel has no NCCL).
CUDA_BUILD_ONLY = {"torch.distributed.ProcessGroupNCCL", "torch.distributed.ProcessGroupNCCL.Options"}


def _files() -> Iterator[Path]:
    for entry in SOURCES:
        path = REPO / entry
        yield from (sorted(path.rglob("*.py")) if path.is_dir() else [path])


def _module_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the torch module it names: ``import torch.distributed as dist`` gives
    ``dist -> torch.distributed``; ``import torch.nn.functional`` binds ``torch``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    aliases[alias.asname or "torch"] = alias.name if alias.asname else "torch"
    return aliases


def torch_names(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(dotted torch name, line) for each ``from torch... import x`` and each outermost
    attribute chain rooted at a torch module alias."""
    aliases = _module_aliases(tree)
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            parts, root = [], node
            while isinstance(root, ast.Attribute):
                parts.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                yield ".".join([aliases[root.id], *reversed(parts)]), node.lineno


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is an attribute path from an importable module, importing submodules
    on the way (``torch.distributed.checkpoint`` is not an attribute until imported)."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                return False
    return True


def test_the_scan_finds_names_and_a_missing_one():
    tree = ast.parse(
        "import torch\nimport torch.distributed as dist\nfrom torch.nn import Linear\n"
        "x = torch.cuda.Event(enable_timing=True)\ny = dist.ProcessGroupGloo\nz = torch.no_such_name.x\n"
    )
    names = {name for name, _ in torch_names(tree)}
    assert names == {"torch.nn.Linear", "torch.cuda.Event", "torch.distributed.ProcessGroupGloo", "torch.no_such_name.x"}
    assert [resolves(n) for n in sorted(names)] == [True, True, True, False]


def test_every_torch_name_the_gpu_machine_runs_exists_in_this_torch():
    missing, seen = [], 0
    for path in _files():
        for name, line in torch_names(ast.parse(path.read_text())):
            seen += 1
            if not resolves(name) and not (name in CUDA_BUILD_ONLY and not torch.backends.cuda.is_built()):
                missing.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert seen > 500, f"the scan found only {seen} torch names: is it still reading the sources?"
    assert missing == [], f"torch {torch.__version__} lacks: {missing}"
