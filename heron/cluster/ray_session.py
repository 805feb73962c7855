"""Starting and stopping Ray for one run.

A local Ray (``cluster.address`` empty) is started small (``cluster.num_cpus``), with no
dashboard, and **reachable from this machine only**: every Ray process (GCS, raylet, the
driver's and the workers' gRPC servers, the dashboard / runtime-env agents) listens on
127.0.0.1. Ray binds its servers to loopback only when the node's address is 127.0.0.1, and
it picks that address on its own only in its single-machine mode (the one it uses on macOS
and Windows, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``); ``ray.init(_node_ip_address=
"127.0.0.1")`` does not help, Ray replaces a loopback address by the network one. So the
local start switches that mode on for the duration of ``ray.init`` (the processes it starts
inherit it) and checks the result. Token auth is off for it (``RAY_AUTH_MODE=disabled``)
unless the environment says otherwise; usage stats are off unless asked for. Its workers run
at the driver's priority (``worker_niceness=0``): they do the run's compute, and at Ray's
default niceness of 15 any other process on the machine takes their CPU (two busy processes on
two cores left the Ray tests under 10 % of a core).

A joined cluster (``address``) or a Ray already initialised by the caller is left running;
the run only removes what it created (actors, placement group). Securing a real cluster
(token auth, firewalls) is the cluster owner's choice: see docs/cluster.md.
"""

from __future__ import annotations

import ipaddress
import os
from contextlib import contextmanager
from typing import Iterator

import ray

from heron.cluster.errors import ClusterError
from heron.config.cluster import ClusterConfig
from heron.interrupt import install_interrupt_handlers

LOOPBACK = "127.0.0.1"
SINGLE_MACHINE_MODE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node address is 127.0.0.1


def start_ray(cfg: ClusterConfig) -> bool:
    """Initialises Ray if needed; returns True when this call started it (and must stop it).
    Ray replaces the process's SIGTERM handler in ``ray.init`` (its own exits with a core
    dump); heron's is put back afterwards, so SIGTERM unwinds the run like Ctrl-C."""
    if ray.is_initialized():
        return False
    if cfg.address:
        ray.init(address=cfg.address, log_to_driver=True)
    else:
        start_local_ray(cfg.num_cpus)
    install_interrupt_handlers()
    return True


def start_local_ray(num_cpus: int, log_to_driver: bool = True) -> None:
    """A one-machine Ray listening on 127.0.0.1 only, without dashboard (tests use it too)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # nothing outside this machine can reach it
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with _single_machine_mode():
        ray.init(
            num_cpus=num_cpus, include_dashboard=False, log_to_driver=log_to_driver,
            _system_config={"worker_niceness": 0},
        )
    address = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(address).is_loopback:
        ray.shutdown()
        raise ClusterError(
            f"the local Ray took the network address {address} instead of {LOOPBACK}, so it would listen on "
            f"every interface; this Ray version ignores {SINGLE_MACHINE_MODE}=0: pin ray to requirements.txt"
        )


@contextmanager
def _single_machine_mode() -> Iterator[None]:
    """Ray's single-machine mode for the duration of one ``ray.init``. Ray reads the variable
    once, at import, into ``ray_constants.ENABLE_RAY_CLUSTER``; ray is usually imported
    already, so the constant is set too. Both are restored: a later ``ray.init(address=...)``
    in this process must see the cluster normally."""
    from ray._private import ray_constants

    previous_env, previous_flag = os.environ.get(SINGLE_MACHINE_MODE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE_MODE] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous_flag
        if previous_env is None:
            os.environ.pop(SINGLE_MACHINE_MODE, None)
        else:
            os.environ[SINGLE_MACHINE_MODE] = previous_env
