"""Builds heron's wheel from a copy of the source and makes fresh venvs that hold it plus its core
dependencies only, for tests/e2e/test_package.py.

Two ways to fill a venv with the core dependencies:
- ``link_core_dependencies``: symlinks, into the new venv's site-packages, the files of each
  distribution the wheel's ``Requires-Dist`` needs (followed transitively through the
  installed metadata, markers evaluated) from the test's own environment. It takes seconds and
  leaves out everything else (Ray, datasets, pytest, ...), so it proves the declared core is enough.
- ``pip_install_core``: a real ``pip install`` of the same requirements, constrained to
  requirements.txt's pins (torch's CPU wheel comes from local disk; see notes-cpu.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from importlib.metadata import Distribution, distribution, distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PIP_TIMEOUT_S = 1800  # only a hang reaches it: a cold install from the local mirror takes minutes


def build_wheel(out: Path) -> Path:
    """``pip wheel`` on a copy of what the wheel is built from (heron/, pyproject.toml,
    README.md): the build writes nothing into the checkout, and the wheel cannot depend on
    files beside them."""
    src = out / "src"
    shutil.copytree(REPO / "heron", src / "heron", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out / "dist"), str(src)]
    subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT_S)
    (wheel,) = (out / "dist").glob("heron-*.whl")
    return wheel


def wheel_metadata(wheel: Path) -> tuple[dict[str, list[str]], list[str], str]:
    """(METADATA headers -> values, files in the wheel, entry_points.txt)."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    headers: dict[str, list[str]] = {}
    for key, value in message.items():
        headers.setdefault(key, []).append(value)
    return headers, names, entry_points


def core_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's unconditional ``Requires-Dist`` (no ``extra == ...`` marker)."""
    reqs = [Requirement(r) for r in wheel_metadata(wheel)[0].get("Requires-Dist", [])]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def new_venv(path: Path, with_pip: bool) -> Path:
    cmd = [sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)]
    subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT_S)
    return path / "bin" / "python"


def _closure(reqs: list[Requirement]) -> dict[str, Distribution]:
    """Installed distributions that ``reqs`` need, transitively (markers and extras evaluated)."""
    found: dict[str, Distribution] = {}
    followed: set[tuple[str, str]] = set()  # (distribution, extra) whose requirements are queued
    todo = list(reqs)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        found.setdefault(name, distribution(req.name))
        for extra in (req.extras or {""}) - {e for n, e in followed if n == name}:
            followed.add((name, extra))
            for line in found[name].requires or []:
                dep = Requirement(line)
                if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                    todo.append(dep)
    return found


def _site_files(dist: Distribution) -> list[str]:
    """The distribution's files inside site-packages, from its RECORD (scripts under ../bin left
    out); read as text because ``Distribution.files`` is slow on torch's thousands of entries."""
    lines = (dist.read_text("RECORD") or "").splitlines()
    return [p for p in (line.rsplit(",", 2)[0] for line in lines) if p and not p.startswith("..")]


def link_core_dependencies(python: Path, reqs: list[Requirement]) -> list[str]:
    """Symlinks the files of ``reqs``' closure into ``python``'s venv; returns the distribution names.
    A top-level entry only included distributions own is linked whole; one shared with a left-out
    distribution (a namespace package) is linked file by file."""
    source = Path(sysconfig.get_paths()["purelib"])
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    target = Path(subprocess.check_output([str(python), "-c", code], text=True).strip())
    included = _closure(reqs)
    owners: dict[str, set[str]] = {}
    for dist in distributions():
        for top in {f.split("/")[0] for f in _site_files(dist)}:
            owners.setdefault(top, set()).add(canonicalize_name(dist.metadata["Name"]))
    for dist in included.values():
        files = _site_files(dist)
        for top in {f.split("/")[0] for f in files}:
            entries = [top] if owners[top] <= set(included) else [f for f in files if f.split("/")[0] == top]
            for entry in entries:
                link, src = target / entry, source / entry
                if not os.path.lexists(link) and os.path.lexists(src):
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(src)
    return sorted(included)


def install_wheel(python: Path, wheel: Path) -> None:
    """``pip install --no-deps`` of the wheel into ``python``'s venv, with this environment's pip
    (``--python``), so the venv needs no pip of its own."""
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT_S)


def pip_install_core(python: Path, reqs: list[Requirement], work: Path) -> None:
    """A real install of ``reqs`` into ``python``'s venv, constrained to requirements.txt's pins
    (written without extras: pip refuses ``ray[default]==...`` as a constraint)."""
    lines = (REPO / "requirements.txt").read_text().splitlines()
    pins = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{r.name}{r.specifier}\n" for r in pins))
    cmd = [str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *map(str, reqs)]
    subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT_S)


def clean_env() -> dict[str, str]:
    """The environment for commands in the new venv: nothing that points back at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONNOUSERSITE": "1"}
