"""The engines tier (``make test-engines``): heron against a real vLLM server from .venv-vllm.

Every test module here sets ``pytestmark = pytest.mark.engines`` (excluded from the default tier). A missing venv
fails the tests with the fix (``make vllm-venv``) instead of skipping them.

No server may outlive a test: every process heron starts inherits ``LEAK_MARK`` in its
environment, and after each test any live process of the vLLM venv carrying it, outside the
process group of a module's shared engine, fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from heron.rollout.vllm.build import REPO_ROOT

LEAK_MARK = f"HERON_ENGINE_TEST_SESSION_{os.getpid()}"
os.environ[LEAK_MARK] = "1"
VLLM_VENV = REPO_ROOT / ".venv-vllm"
SHARED_PIDS: set[int] = set()  # processes of module-scoped engines, alive on purpose
EXIT_S = 120  # only a hang reaches it: a stopped group is SIGKILLed after its grace


def vllm_processes() -> list[psutil.Process]:
    """Live vLLM-side processes started by this test session: the vLLM venv's python (launcher,
    guardian, resource tracker) and vLLM's renamed children (``VLLM::EngineCore``, ``VLLM::Worker``,
    whose exe is the base interpreter)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            argv0 = (proc.info["cmdline"] or [""])[0]
            if not (argv0.startswith(str(VLLM_VENV)) or argv0.startswith("VLLM::") or (proc.info["name"] or "").startswith("VLLM::")):
                continue
            if proc.environ().get(LEAK_MARK) == "1" and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def group_processes(pgid: int) -> list[psutil.Process]:
    out = []
    for proc in vllm_processes():
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc)
        except ProcessLookupError:
            continue
    return out


def server_tree(launcher_pid: int) -> list[psutil.Process]:
    """A running server's processes: its process group (launcher, engine core, worker, resource
    tracker) and the launcher's guardian (a child in its own session)."""
    group = group_processes(launcher_pid)
    guardians = [c for c in psutil.Process(launcher_pid).children() if c.pid not in {p.pid for p in group}]
    return group + guardians


def assert_gone(procs: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(procs, timeout=EXIT_S)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"vLLM processes left running: {[(p.pid, p.name()) for p in alive]}"


@pytest.fixture(autouse=True)
def no_server_left_behind():
    yield
    assert_gone([proc for proc in vllm_processes() if proc.pid not in SHARED_PIDS])


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    python = VLLM_VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{python} does not exist: run `make vllm-venv` (or `make test-engines`, which creates it)")
    return python


def vllm_overrides(model_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """A run config's overrides for the toy model served by vLLM (fp32, eager, small KV cache)."""
    return [
        f"model.path={model_dir}", f"run.dir={run_dir}", "engine.kind=vllm", "engine.vllm.kv_cache_gib=0.25",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *extra,
    ]


def start_vllm_engine(model_dir: Path, run_dir: Path):
    """A vLLM engine built through the registry from a run config, as a run builds it."""
    from heron.build import engine_spec
    from heron.config.root import load_config
    from heron.rollout.registry import build_engine

    data = run_dir / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    cfg = load_config(None, vllm_overrides(model_dir, run_dir, f"data.path={data}"))
    return build_engine(engine_spec(cfg, pad_token_id=0))


@pytest.fixture(scope="module")
def vllm_engine(vllm_venv, toy_model_dir, tmp_path_factory):
    """One real vLLM server per test module, on the read-only toy model."""
    engine = start_vllm_engine(toy_model_dir, tmp_path_factory.mktemp("vllm-engine"))
    procs = server_tree(engine.server.pid)
    SHARED_PIDS.update(p.pid for p in procs)
    try:
        yield engine
    finally:
        engine.close()
        SHARED_PIDS.difference_update(p.pid for p in procs)
        assert_gone(procs)
