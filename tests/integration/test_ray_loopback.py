"""A local Ray (``cluster.address`` empty) is reachable from this machine only: every socket
that any process of the run listens on -- the driver, GCS, raylet, dashboard and runtime-env
agents, the engine and trainer-rank workers, the trainer group's and the weight broadcast's
TCPStores and gloo pairs -- is bound to loopback, so nothing can be reached from the
machine's network address. (Connecting to that address proves nothing here: other servers
on the machine may hold the same port numbers there.) The default placement is used (2 ranks
+ 1 engine, 3 bundles on 2 CPUs): the default request is placeable on the default local Ray."""

from __future__ import annotations

import os

import ray

from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.process_helpers import command, listeners, ray_session_processes
from tests.toy_run import toy_run_overrides


def _config(toy_model_dir, toy_data_path, tmp_path):
    return load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, tmp_path, "rollout.num_rollouts=1", "checkpoint.interval=1",
        "cluster.backend=ray", "train.world_size=2", "cluster.weight_transport=broadcast",
    ))


def test_local_ray_listens_on_loopback_only(no_ray, toy_model_dir, toy_data_path, tmp_path):
    with RLRun(_config(toy_model_dir, toy_data_path, tmp_path)) as run:
        run.train(run.advantages(run.reward(run.generate(0))))
        run.push_weights()  # the broadcast group's store and gloo pairs exist from here on
        run.checkpoint(0)  # the ranks' checkpoint gloo group too
        session_dir = ray._private.worker.global_worker.node.get_session_dir_path()
        processes = ray_session_processes(os.getpid(), session_dir)
        commands = [command(p) for p in processes]
        found = listeners(processes)
        node_address = ray.util.get_node_ip_address()
    assert any("gcs_server" in c for c in commands) and any("raylet" in c for c in commands), commands
    assert sum(c.startswith("ray::ComponentHost") for c in commands) == 3, commands  # 2 ranks + 1 engine
    assert any(f.process.startswith("ray::ComponentHost") for f in found), found  # the workers' sockets were seen
    assert [f for f in found if not f.loopback] == []
    assert node_address == "127.0.0.1"


def test_local_ray_workers_run_at_the_drivers_priority(ray_session):
    """Ray nices its workers by 15 unless told otherwise; they do the run's compute, so on a
    shared machine any other process would take their CPU."""

    @ray.remote(num_cpus=0)
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)

    assert ray.get(niceness.remote()) == os.getpriority(os.PRIO_PROCESS, 0)
