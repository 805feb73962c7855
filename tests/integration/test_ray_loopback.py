"""A local Ray (``cluster.address`` empty) is reachable from this machine only: every socket
that any process of the run listens on -- the driver, GCS, raylet, dashboard and runtime-env
agents, the engine and trainer-rank workers, the trainer group's and the weight broadcast's
TCPStores and gloo pairs -- is bound to loopback, and nothing answers on the machine's
network address. Default placement (2 ranks + 1 engine, 3 bundles on 2 CPUs) is used, so
this also shows that the default request is placeable on the default local Ray."""

from __future__ import annotations

import os
import socket

import ray

from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.toy_run import toy_run_overrides
from tests.process_helpers import command, listeners, network_addresses, process_tree


def _config(toy_model_dir, toy_data_path, tmp_path):
    return load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, tmp_path, "rollout.num_rollouts=1", "checkpoint.interval=1",
        "cluster.backend=ray", "train.world_size=2", "cluster.weight_transport=broadcast",
    ))


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


def test_local_ray_listens_on_loopback_only(no_ray, toy_model_dir, toy_data_path, tmp_path):
    with RLRun(_config(toy_model_dir, toy_data_path, tmp_path)) as run:
        run.train(run.advantages(run.reward(run.generate(0))))
        run.push_weights()  # the broadcast group's store and gloo pairs exist from here on
        run.checkpoint(0)  # the ranks' checkpoint gloo group too
        processes = process_tree(os.getpid())
        commands = [command(p) for p in processes]
        found = listeners(processes)
        node_address = ray.util.get_node_ip_address()
        reachable = [(a, f.port, f.process) for a in network_addresses() for f in found if _answers(a, f.port)]
    assert any("gcs_server" in c for c in commands) and any("raylet" in c for c in commands), commands
    assert sum(c == "ray::ComponentHost" for c in commands) == 3, commands  # 2 ranks + 1 engine
    assert {f.process for f in found} >= {"ray::ComponentHost"}, found  # the workers' sockets were seen
    assert [f for f in found if not f.loopback] == []
    assert node_address == "127.0.0.1"
    assert reachable == []
