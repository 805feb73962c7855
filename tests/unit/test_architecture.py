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
PURE = ["algo", "trainer", "critic", "config", "data", "reward", "records.py", "seeding.py", "rollout/sampling.py"]
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
    surface["heron"] = sorted(o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help"))
    assert surface == EXPECTED_CLI, "new CLI flags: put new knobs into a component config instead"


EXPECTED_CLI = {
    "heron": ["--version"],
    "train": ["--config"],
    "sft": ["--config"],
    "check": ["--config"],
    "eval": ["--checkpoint", "--config"],
    "config": [],
    "toy": ["--out"],
    "demo": ["--config", "--run-dir"],
    "ckpt": [],
}


# --- 4. No import cycle inside heron/ ------------------------------------------------------------
def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks (imports there never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """heron modules an import statement loads: ``from heron.a import b`` loads heron.a.b if
    that is a module, else heron.a; relative imports are resolved against ``module``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    return [t for t in targets if t in known]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """heron module -> heron modules it imports anywhere (module level or inside functions:
    a cycle hidden in a function still couples the two modules), ``TYPE_CHECKING`` excluded."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    known = set(paths)
    graph = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        edges = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) not in skip:
                edges.update(_imported(node, module, path.name == "__init__.py", known))
        graph[module] = edges - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_inside_heron():
    assert import_cycles(import_graph()) == []


def test_the_cycle_check_catches_a_cycle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "heron"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from heron.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from heron import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from heron.a import y\n")
    assert import_cycles(import_graph(pkg)) == [["heron.a", "heron.b"]]


# --- 5. Short functions --------------------------------------------------------------------------
MAX_FUNCTION_LINES = 60


def long_functions(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_over_60_lines():
    assert long_functions() == []


# --- 6. Endpoints are used through their protocols -----------------------------------------------
# The trainer, the engines and the weight handles are used through their protocols
# (heron.trainer.protocol, heron.rollout.engine, heron.weights.handle): code that joins the
# parts never asks which kind it holds. hasattr is banned outright (a duck-typed probe is a
# missing protocol member); isinstance/issubclass against an endpoint type is banned outside the
# protocol modules.
ENDPOINT_TYPES = {
    "PolicyTrainer", "DataParallelTrainer", "TrainerGroup", "Trainer", "EmbeddedEngine", "RemoteEngine",
    "RolloutEngine", "ServerEngine", "Critic", "CriticGroup", "WeightHandle", "InMemory", "SafetensorsFile", "ObjectStore", "Broadcast",
}
PROTOCOL_MODULES = {"trainer/protocol.py", "rollout/engine.py", "weights/handle.py"}


def endpoint_dispatch(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "hasattr":
                found.append(f"{rel}:{node.lineno} hasattr")
            elif node.func.id in ("isinstance", "issubclass") and rel not in PROTOCOL_MODULES and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if names & ENDPOINT_TYPES:
                    found.append(f"{rel}:{node.lineno} {node.func.id}(..., {ast.unparse(node.args[1])})")
    return found


def test_endpoints_are_used_through_their_protocols():
    assert endpoint_dispatch() == []


def test_the_dispatch_check_catches_probes(tmp_path):
    (tmp_path / "x.py").write_text(
        "if hasattr(engine, 'served_versions'):\n    pass\nok = isinstance(state, dict)\n"
        "bad = isinstance(component, (PolicyTrainer, int))\n"
    )
    assert endpoint_dispatch(tmp_path) == ["x.py:1 hasattr", "x.py:4 isinstance(..., (PolicyTrainer, int))"]


# --- 7. Device kinds live in the device seam ------------------------------------------------------
# heron.device is the one module that knows device kinds; the residency and cluster layers ask it
# (pinned buffers, synchronisation, the collective backend, GPUs per bundle). Outside it, only
# backends that are CUDA-specific by nature may name CUDA: the torch_memory_saver backend, the
# vLLM server backend (its launch flags), and configs (the literal choices of run/cluster/engine.device).
DEVICE_SEAM_EXEMPT = ("device.py", "residency/torch_memory_saver.py", "rollout/vllm/", "config/")


def device_kind_uses(root: Path = ROOT) -> list[str]:
    """``torch.cuda``/``.cuda()`` and the device-kind strings ``"cuda"``/``"cuda:N"`` (a comparison
    or a device string; messages that name a config value like ``run.device=cuda`` are fine)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel.startswith(DEVICE_SEAM_EXEMPT):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "cuda":
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value == "cuda" or node.value.startswith("cuda:"):
                    found.append(f"{rel}:{node.lineno} {node.value!r}")
    return sorted(found)


def test_device_kinds_only_in_the_device_seam():
    assert device_kind_uses() == []


def test_the_device_check_catches_kinds(tmp_path):
    (tmp_path / "x.py").write_text(
        "import torch\nif device == 'cuda':\n    pass\nok = torch.cuda.is_available()\n"
        "msg = 'run.device=cuda needs CUDA'\nt = torch.device('cuda:1')\n"
    )
    assert device_kind_uses(tmp_path) == ["x.py:2 'cuda'", "x.py:4 torch.cuda", "x.py:6 'cuda:1'"]
