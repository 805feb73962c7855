"""The processes of a run (the driver and everything it started: Ray's GCS, raylet, agents,
workers) and the sockets they listen on, read with psutil. Shared by the loopback and
signal tests."""

from __future__ import annotations

import ipaddress
import signal
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str  # the command line's first word (Ray sets e.g. "ray::ComponentHost")
    kind: str  # "tcp" (listening) or "udp" (bound)
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address.split("%")[0])
        mapped = getattr(ip, "ipv4_mapped", None)  # "::ffff:127.0.0.1" is loopback too
        return (mapped or ip).is_loopback


def default_sigint() -> None:
    """``preexec_fn`` of a child a test will Ctrl-C: SIGINT back to its default disposition. A
    shell starts background jobs with SIGINT ignored and children inherit that (Python then
    installs no KeyboardInterrupt handler), so a suite run from ``make test &`` would see the
    child ignore the signal, as ``nohup`` and background jobs are meant to."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def process_tree(root_pid: int) -> list[psutil.Process]:
    """``root_pid`` and every process below it (children are reparented when a parent dies,
    so take this while the run is alive)."""
    root = psutil.Process(root_pid)
    return [root, *root.children(recursive=True)]


def command(process: psutil.Process) -> str:
    """The first word of the command line; a Ray worker's is its title, e.g.
    ``ray::ComponentHost`` or, while it runs a method, ``ray::ComponentHost.train``."""
    words = _cmdline(process)
    return words[0] if words else "?"


def listeners(processes: list[psutil.Process]) -> list[Listener]:
    """Listening TCP and bound UDP sockets of ``processes``."""
    found = []
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        for c in connections:
            kind = "tcp" if c.type == 1 else "udp"  # socket.SOCK_STREAM == 1
            if (kind == "tcp" and c.status == psutil.CONN_LISTEN) or (kind == "udp" and not c.raddr):
                found.append(Listener(process.pid, command(process), kind, c.laddr.ip, c.laddr.port))
    return found


def still_running(processes: list[psutil.Process]) -> list[str]:
    """Those of ``processes`` still alive (same pid and start time), described."""
    return [f"{p.pid} {command(p)}" for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def ray_session_processes(driver_pid: int, session_dir: str) -> list[psutil.Process]:
    """The driver and the processes of its Ray session: those started with the session's
    folder on their command line (GCS, raylet, monitors) and everything below them (agents,
    workers). A previous session's stragglers under the same driver are left out."""
    driver = psutil.Process(driver_pid)
    heads = [p for p in driver.children() if session_dir in " ".join(_cmdline(p))]
    return [driver, *heads, *(c for head in heads for c in head.children(recursive=True))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []
