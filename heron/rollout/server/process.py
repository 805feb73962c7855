"""``ServerProcess``: one inference-server subprocess that heron owns, from launch to the last child.

How it is kept from outliving heron, on every exit path:
- It starts in its own session, so it leads a new process group that holds every process the
  server spawns (vLLM's engine core and workers); ``stop`` signals the whole group: SIGTERM,
  then SIGKILL after ``grace_s``. Ctrl-C at the terminal reaches heron only (the group is not
  the terminal's), and heron then stops the server itself.
- ``stop`` runs from ``close`` (context manager, ``Components.close``) and from ``atexit``
  (normal end, an exception, and SIGTERM, which heron turns into ``SystemExit``).
- When heron dies without running any of that (SIGKILL, a Ray actor killed), the kernel closes
  the server's stdin pipe, whose other end only heron holds: the heron launcher's guardian
  process watches that stdin and, on EOF, kills the server's process group
  (``server_side/heron_vllm_launcher.py``), also when the launcher itself was killed first.

A server that exits on its own is reported, whenever heron next talks to it, as one line naming
the server, its exit code and its log file (``ServerDiedError``).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from heron.rollout.server.errors import ServerDiedError, ServerStartError

_LIVE: "weakref.WeakSet[ServerProcess]" = weakref.WeakSet()
POLL_S = 0.25  # how often start-up checks the health URL and the process


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it); the server binds it right after."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path: Path, num_lines: int = 1, max_bytes: int = 16384) -> str:
    """The last non-empty lines of a log file (joined by ' | '), or '' if it has none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-num_lines:])


class ServerProcess:
    """A launched server: ``start`` spawns it and waits for its health URL; ``stop`` ends its group."""

    def __init__(self, name: str, command: Sequence[str], env: Mapping[str, str], log_path: Path, health_url: str):
        self.name = name
        self.command = list(command)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.health_url = health_url
        self.proc: subprocess.Popen | None = None
        self._stopped = False

    # --- start -------------------------------------------------------------------------------
    def start(self, timeout_s: float, is_ready: Callable[[], bool] | None = None) -> float:
        """Spawns the server and waits until it is healthy; returns the seconds it took.
        Raises ``ServerStartError`` (one line, naming the log) when it exits first or the
        deadline passes; the group is stopped before raising."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"=== heron: starting {self.name}: {' '.join(self.command)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )
        _LIVE.add(self)
        try:
            self._wait_healthy(started + timeout_s, is_ready or self.healthy)
        except BaseException:
            self.stop(grace_s=5.0)
            raise
        return time.monotonic() - started

    def _wait_healthy(self, deadline: float, is_ready: Callable[[], bool]) -> None:
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.name} exited with code {code} during start-up; see {self.log_path} "
                    f"(last line: {log_tail(self.log_path) or '<empty>'})"
                )
            if is_ready():
                return
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name} did not become healthy before its start-up deadline; see {self.log_path} "
                    f"(last line: {log_tail(self.log_path) or '<empty>'}); raise engine.vllm.startup_timeout_s "
                    f"if the machine is just slow"
                )
            time.sleep(POLL_S)

    def healthy(self) -> bool:
        """True when the health URL answers 200 now."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    # --- liveness ----------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def exit_code(self) -> int | None:
        """None while the server runs (or before it started)."""
        return self.proc.poll() if self.proc is not None else None

    def check_alive(self, during: str, settle_s: float = 0.0) -> None:
        """Raises ``ServerDiedError`` naming the server and its log if it has exited. ``settle_s``:
        after a dropped connection, how long to let a dying process finish exiting first."""
        if self.proc is None or self._stopped:
            raise ServerDiedError(f"{self.name} is not running (stopped or never started); cannot {during}")
        try:
            code = self.proc.wait(timeout=settle_s) if settle_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            raise ServerDiedError(
                f"{self.name} (pid {self.proc.pid}) exited with code {code} during {during}; see {self.log_path} "
                f"(last line: {log_tail(self.log_path) or '<empty>'})"
            )

    # --- stop --------------------------------------------------------------------------------
    def stop(self, grace_s: float = 20.0) -> None:
        """Stops the server's whole process group: stdin closed and SIGTERM, then SIGKILL after
        ``grace_s``. Idempotent; safe from atexit and after the server died."""
        if self.proc is None or self._stopped:
            return
        self._stopped = True
        _LIVE.discard(self)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        pgid = self.proc.pid  # the session leader's pid is its group id (start_new_session)
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(pgid, signal.SIGKILL)  # children may outlive the leader: kill the rest too
        self.proc.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


@atexit.register
def _stop_all() -> None:
    """Interpreter exit (also via SystemExit from SIGTERM): no server outlives heron."""
    for server in list(_LIVE):
        server.stop(grace_s=5.0)
