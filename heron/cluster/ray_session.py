"""Starting and stopping Ray for one run.

A local Ray (``cluster.address`` empty) is started small (``cluster.num_cpus``, no
dashboard, token auth off unless the environment says otherwise) and shut down by the run.
A joined cluster (``address``) or a Ray already initialised by the caller is left running;
the run only removes what it created (actors, placement group).
"""

from __future__ import annotations

import os

import ray

from heron.config.cluster import ClusterConfig


def start_ray(cfg: ClusterConfig) -> bool:
    """Initialises Ray if needed; returns True when this call started it (and must stop it)."""
    if ray.is_initialized():
        return False
    if cfg.address:
        ray.init(address=cfg.address, log_to_driver=True)
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local, loopback-only cluster
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=True)
    return True
