"""ServerProcess against a real stand-in server process (tests/integration/_fake_server.py): it
starts on a free loopback port, its log goes to the file, start-up failures are one line naming
the log, a server that dies mid-use is named, and no process of its group survives any exit path
of its owner (normal stop, SIGTERM, Ctrl-C, SIGKILL through the launcher's stdin watchdog).

Deadlines here only catch hangs: every wait ends on an event (a process exits, a URL answers)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from heron.rollout.server.errors import ServerDiedError, ServerStartError
from heron.rollout.server.http import ServerClient
from heron.rollout.server.process import ServerProcess, free_port
from tests.process_helpers import default_sigint

HERE = Path(__file__).resolve().parent
FAKE = HERE / "_fake_server.py"
HANG_S = 60  # generous: only a hang reaches it


def _fake(log_path: Path, *args: str) -> ServerProcess:
    port = free_port()
    command = [sys.executable, str(FAKE), "--port", str(port), *args]
    return ServerProcess("fake server", command, {}, log_path, f"http://127.0.0.1:{port}/health")


def _group_pids(log_path: Path) -> list[int]:
    """The fake server's pid and its child's, as it printed them to its log."""
    match = re.search(r"fake server pid (\d+) child (\d+)", log_path.read_text())
    assert match, log_path.read_text()
    return [int(match.group(1)), int(match.group(2))]


def _assert_all_gone(pids: list[int]) -> None:
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(procs, timeout=HANG_S)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {alive}"


def test_starts_healthy_logs_to_its_file_and_stop_ends_the_whole_group(tmp_path):
    log = tmp_path / "engine.log"
    server = _fake(log)
    elapsed = server.start(timeout_s=HANG_S)
    assert server.healthy() and elapsed < HANG_S
    pids = _group_pids(log)
    assert all(psutil.pid_exists(p) for p in pids)
    assert log.read_text().startswith("=== heron: starting fake server:")
    server.stop(grace_s=10)
    _assert_all_gone(pids)
    server.stop()  # idempotent


def test_server_exiting_during_start_up_is_one_line_naming_its_log(tmp_path):
    log = tmp_path / "engine.log"
    with pytest.raises(ServerStartError) as error:
        _fake(log, "--exit-code", "3").start(timeout_s=HANG_S)
    message = str(error.value)
    assert "\n" not in message and "exited with code 3 during start-up" in message
    assert str(log) in message and "failed on purpose" in message
    _assert_all_gone(_group_pids(log))  # its child too


def test_missed_start_up_deadline_stops_the_group_and_names_the_setting(tmp_path):
    log = tmp_path / "engine.log"
    server = _fake(log, "--delay", "3600")
    with pytest.raises(ServerStartError, match=r"did not become healthy.*startup_timeout_s"):
        server.start(timeout_s=2.0)
    _assert_all_gone(_group_pids(log))


def test_a_server_killed_mid_use_is_named_with_its_exit_code_and_log(tmp_path):
    log = tmp_path / "engine.log"
    server = _fake(log)
    server.start(timeout_s=HANG_S)
    client = ServerClient(server, server.health_url.rsplit("/", 1)[0], timeout_s=HANG_S)
    assert client.get("/health", during="generate") is None
    server_pid, child_pid = _group_pids(log)
    psutil.Process(server_pid).kill()
    started = time.monotonic()
    with pytest.raises(ServerDiedError) as error:
        client.get("/health", during="generate")
    assert time.monotonic() - started < HANG_S
    message = str(error.value)
    assert "\n" not in message and f"(pid {server_pid}) exited with code -9 during generate" in message
    assert str(log) in message
    server.stop(grace_s=5)  # the child outlived its parent; stop still ends it (same group)
    _assert_all_gone([child_pid])


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL", "SIGKILL owner and server"])
def test_no_server_outlives_its_owner(tmp_path, how):
    """SIGTERM and SIGINT (Ctrl-C) unwind the owner, whose atexit stops the server; SIGKILL runs
    nothing in the owner, so the launcher's guardian must end the group. The last case is what
    Ray does to a killed actor: it SIGKILLs the actor and its direct children (the server) at
    once, and the server's own children must still go."""
    log = tmp_path / "engine.log"
    mode = "watchdog" if how.startswith("SIGKILL") else "plain"
    owner = subprocess.Popen([sys.executable, str(HERE / "_server_owner.py"), str(log), mode],
                             stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        server_pid = int(owner.stdout.readline())
        pids = _group_pids(log)
        assert pids[0] == server_pid and all(psutil.pid_exists(p) for p in pids)
        if how == "SIGKILL owner and server":
            psutil.Process(server_pid).kill()
        owner.send_signal(getattr(signal, how.split()[0]))
        owner.wait(timeout=HANG_S)
        _assert_all_gone(pids)
    finally:
        owner.kill()
        owner.wait()
