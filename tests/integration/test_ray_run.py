"""The unchanged loop on the Ray backend, starting and stopping its own Ray: the run trains,
evaluates through the engine actor, and leaves no Ray behind -- also when interrupted."""

from __future__ import annotations

import pytest
import ray

from heron.config.root import load_config
from heron.loop import train
from heron.rl_run import RLRun
from tests.tolerance import RAY_START


def _config(toy_model_dir, toy_data_path, tmp_path, world_size=2):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"eval.path={toy_data_path.parent / 'test.jsonl'}",
        "eval.interval=1", f"run.dir={tmp_path}", "rollout.num_rollouts=2", "rollout.batch_size=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "train.micro_batch_size=2",
        "tracking.progress=false", "tracking.summary=false", "cluster.backend=ray", RAY_START, "cluster.num_cpus=2",
        f"train.world_size={world_size}", "cluster.cpus_per_bundle=0.5", "colocate=true",
    ])


def test_loop_runs_on_ray_and_shuts_it_down(no_ray, toy_model_dir, toy_data_path, tmp_path):
    assert not ray.is_initialized()
    try:
        records = train(_config(toy_model_dir, toy_data_path, tmp_path))
    finally:
        started = ray.is_initialized()
        ray.shutdown()
    assert not started, "the run left Ray running"
    assert [r["policy_version"] for r in records] == [1, 2]
    assert all("eval/accuracy" in r for r in records)
    assert (tmp_path / "metrics.jsonl").is_file()
    assert (tmp_path / "checkpoints" / "rollout-000001" / "manifest.json").is_file()  # saved after the last rollout


def test_interrupt_shuts_ray_down(no_ray, toy_model_dir, toy_data_path, tmp_path):
    """Ctrl-C raises KeyboardInterrupt in the main thread; the run's exit path must stop Ray."""
    with pytest.raises(KeyboardInterrupt):
        try:
            with RLRun(_config(toy_model_dir, toy_data_path, tmp_path, world_size=1)) as run:
                run.generate(0)
                raise KeyboardInterrupt
        finally:
            started = ray.is_initialized()
            ray.shutdown()
    assert not started


@pytest.mark.portability
def test_cli_exits_nonzero_naming_the_problem_and_stops_ray(no_ray, toy_model_dir, toy_data_path, tmp_path, capsys):
    """A placement group the cluster cannot hold: `heron train` fails within the start-up
    deadline with the sizes involved, exit status 1, and leaves no Ray running."""
    from heron.cli import main

    overrides = [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        "cluster.backend=ray", "cluster.cpus_per_bundle=4", "cluster.startup_timeout_s=3", "tracking.progress=false", "checkpoint.enabled=false",
    ]
    status = main(["train", *overrides])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 1
    assert err.startswith("heron: cluster error: placement group of 2 bundles x {'CPU': 4.0} was not ready within 3s")
    assert not ray.is_initialized()
