"""pyproject.toml (ranges, core + extras) and requirements.txt (exact pins) describe the same
environment, and every package heron imports is declared: the core for the embedded local path,
an extra for each feature beyond it (``heron.extras`` names which)."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from heron.extras import EXTRAS

REPO = Path(__file__).resolve().parents[2]
# imported by heron but pinned nowhere, with the reason
NOT_PINNED = {"torch_memory_saver": "CUDA only: it installs on the CPU machine but any use fails (notes-cpu.md)"}
# Run by the vLLM venv's python (requirements-vllm.txt, `make vllm-venv`), never imported by heron itself.
OTHER_VENV = "heron/rollout/vllm/server_side/"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _project() -> dict:
    return _pyproject()["project"]


def _pins() -> dict[str, Requirement]:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    reqs = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    return {canonicalize_name(r.name): r for r in reqs}


def _declared() -> dict[str, list[Requirement]]:
    """'' (core) and each extra -> its requirements, the self-reference ``heron[...]`` left out."""
    project = _project()
    groups = {"": project["dependencies"], **project.get("optional-dependencies", {})}
    return {k: [Requirement(r) for r in v if not r.startswith("heron[")] for k, v in groups.items()}


def _pinned_version(pins: dict[str, Requirement], name: str) -> str:
    (spec,) = pins[canonicalize_name(name)].specifier  # exactly one ==
    assert spec.operator == "==", f"requirements.txt must pin {name} exactly, not {spec}"
    return spec.version


def _assert_pinned_within(pins: dict[str, Requirement], req: Requirement, where: str) -> None:
    """requirements.txt pins ``req``'s package exactly, at a version ``req`` (from ``where``) admits."""
    assert canonicalize_name(req.name) in pins, f"{where} {req} is not pinned in requirements.txt"
    version = _pinned_version(pins, req.name)
    assert req.specifier.contains(version), f"requirements.txt {req.name}=={version} is outside {where}'s {req}"


def test_every_declared_requirement_is_pinned_and_the_pin_satisfies_it():
    pins = _pins()
    for group, reqs in _declared().items():
        for req in reqs:
            _assert_pinned_within(pins, req, f"pyproject [{group or 'core'}]")
            assert req.extras <= pins[canonicalize_name(req.name)].extras, f"pyproject {req} asks for extras requirements.txt does not install"


def test_the_build_backend_is_pinned_and_the_pin_satisfies_the_build_system():
    """tests/e2e/test_package.py builds the wheel without build isolation, with the venv's own
    setuptools: requirements.txt must install one that pyproject's build-system admits."""
    pins = _pins()
    for req in map(Requirement, _pyproject()["build-system"]["requires"]):
        _assert_pinned_within(pins, req, "build-system")


def test_every_pin_is_declared_or_required_by_a_declared_package():
    """A pin nothing declares would be installed by `make venv` but missing from `pip install`."""
    declared = {canonicalize_name(r.name): r for reqs in _declared().values() for r in reqs}
    transitive = set()
    for req in declared.values():
        for line in requires(req.name) or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in req.extras or {""}):
                transitive.add(canonicalize_name(dep.name))
    undeclared = sorted(set(_pins()) - set(declared) - transitive)
    assert undeclared == [], f"pinned in requirements.txt but in no pyproject group: {undeclared}"


def test_all_is_every_extra():
    extras = _project()["optional-dependencies"]
    assert extras["all"] == [f"heron[{','.join(k for k in extras if k != 'all')}]"]


def _third_party_imports() -> dict[str, list[str]]:
    """Top-level module -> heron files importing it (module level or in a function)."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "heron").rglob("*.py")):
        if str(path.relative_to(REPO)).startswith(OTHER_VENV):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"heron", "__future__"}:
                found.setdefault(top, []).append(str(path.relative_to(REPO)))
    return found


def test_every_imported_package_is_declared():
    owners = packages_distributions()
    declared = {canonicalize_name(r.name) for reqs in _declared().values() for r in reqs}
    for module, files in _third_party_imports().items():
        if module in NOT_PINNED:
            continue
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        assert dists & declared, f"{files[0]} imports {module} ({sorted(dists) or 'not installed'}), which pyproject declares nowhere"


def test_each_feature_check_names_an_extra_that_provides_its_modules():
    owners = packages_distributions()
    declared = _declared()
    for key, extra in EXTRAS.items():
        assert key == extra.name and extra.name in declared, f"heron.extras names heron[{extra.name}], not in pyproject"
        names = {canonicalize_name(r.name) for r in declared[extra.name]}
        for module in extra.modules:
            dists = {canonicalize_name(d) for d in owners.get(module, [])}
            assert dists & names, f"heron[{extra.name}] does not install module {module} ({sorted(dists)})"


def test_the_floor_venv_pins_torch_and_transformers_at_pyprojects_floors_and_keeps_every_other_pin():
    """`make test-floor`'s requirements (tests/floor_requirements.py): torch and transformers at the
    ``>=`` bound of their pyproject ranges, which the ranges admit; every other line as
    requirements.txt."""
    from tests.floor_requirements import floor_requirements

    floored = floor_requirements().splitlines()
    original = (REPO / "requirements.txt").read_text().splitlines()
    assert len(floored) == len(original)
    changed = {Requirement(new.split("#")[0]) for old, new in zip(original, floored) if old != new}
    assert {canonicalize_name(r.name) for r in changed} == {"torch", "transformers"}, changed
    for floor in changed:
        (declared,) = [r for r in _declared()[""] if canonicalize_name(r.name) == canonicalize_name(floor.name)]
        (spec,) = floor.specifier
        assert spec.operator == "==" and declared.specifier.contains(spec.version), (floor, declared)
        assert f">={spec.version}" in str(declared.specifier), (floor, declared)
