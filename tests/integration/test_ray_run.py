"""The unchanged loop on the Ray backend, starting and stopping its own Ray: the run trains,
evaluates through the engine actor, and leaves no Ray behind -- also when interrupted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

from heron.config.root import load_config
from heron.loop import train
from heron.rl_run import RLRun
from tests.tolerance import RAY_START


def _config(toy_model_dir, toy_data_path, tmp_path, world_size=2, *extra: str):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"eval.path={toy_data_path.parent / 'test.jsonl'}",
        "eval.interval=1", f"run.dir={tmp_path}", "rollout.num_rollouts=2", "rollout.batch_size=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "train.micro_batch_size=2",
        "tracking.progress=false", "tracking.summary=false", "cluster.backend=ray", RAY_START, "cluster.num_cpus=2",
        f"train.world_size={world_size}", "cluster.cpus_per_bundle=0.5", "colocate=true", *extra,
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


def test_a_bfloat16_engine_takes_broadcast_weights_on_ray(no_ray, toy_model_dir, toy_data_path, tmp_path):
    """engine.embedded.dtype=bfloat16 under float32 trainer ranks: the broadcast sends float32
    buffers, the engine actor casts them into its bfloat16 copy, and every push lands (the run
    checks the engine's version after each one)."""
    try:
        records = train(_config(toy_model_dir, toy_data_path, tmp_path, 2, "engine.embedded.dtype=bfloat16",
                                "cluster.weight_transport=broadcast", "run.allow_emulated_bf16=true"))
    finally:
        ray.shutdown()
    assert [r["policy_version"] for r in records] == [1, 2]
    assert all(0 < r["train/engine_logprob_abs_diff_max"] < float("inf") for r in records)


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


def test_unplaceable_local_request_fails_before_ray_starts(no_ray, toy_model_dir, toy_data_path, tmp_path, capsys, monkeypatch):
    """A placement group larger than the local Ray: `heron train` fails at once (no Ray is
    started, the start-up deadline is never waited), one line with the numbers, exit 2."""
    from heron.cli import main

    inits = []
    real_init = ray.init
    monkeypatch.setattr(ray, "init", lambda *a, **k: inits.append(k) or real_init(*a, **k))  # a spy: calls through
    overrides = [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        "cluster.backend=ray", "cluster.cpus_per_bundle=4", "cluster.startup_timeout_s=600", "tracking.progress=false",
        "checkpoint.enabled=false",
    ]
    status = main(["train", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1].startswith(
        "heron: error: cannot place 2 bundles x {'CPU': 4.0} on a local Ray of cluster.num_cpus=2: 8 CPU needed, 2 available;"
    )
    assert inits == [] and not ray.is_initialized()


def test_unplaceable_request_on_a_running_ray_fails_right_after_connecting(ray_session, toy_model_dir, toy_data_path, tmp_path):
    """Ray already running (as on a joined cluster): compared with ``ray.cluster_resources()``
    before reserving, so the error comes without waiting ``startup_timeout_s`` (600 s here)."""
    from heron.cluster.placement import PlacementError
    from heron.build import build_executor

    cfg = load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "cluster.backend=ray", "train.world_size=2",
        "rollout.batch_size=2", "cluster.cpus_per_bundle=1", "cluster.startup_timeout_s=600",
    ])
    start = time.monotonic()
    with pytest.raises(PlacementError, match=r"cannot place 3 bundles x \{'CPU': 1.0\} on the running Ray: 3 CPU needed, 2 available"):
        build_executor(cfg)
    elapsed = time.monotonic() - start
    assert elapsed < cfg.cluster.startup_timeout_s / 10, f"took {elapsed:.1f}s: the deadline was waited"
    assert ray.is_initialized()  # a Ray heron did not start is left running


def test_a_profiled_rollout_on_ray_brings_back_every_actors_trace(no_ray, toy_model_dir, toy_data_path, tmp_path):
    """tracking.profile on Ray: each actor profiles itself over the rollout's window and sends its
    files back; the trainer ranks' traces hold the train step's matmuls, the engine's the decode's."""
    import json

    from heron.tracking.profiler import rollout_folder

    try:
        train(_config(toy_model_dir, toy_data_path, tmp_path, 2, "tracking.profile.rollouts=[1]", "eval.interval=0"))
    finally:
        ray.shutdown()
    folder = rollout_folder(tmp_path, 1)
    processes = ["", "engine-0.", "trainer-rank-0.", "trainer-rank-1."]
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{p}{f}" for p in processes for f in ("trace.json", "ops.txt"))

    def names(prefix: str) -> set[str]:
        events = json.loads((folder / f"{prefix}trace.json").read_text())["traceEvents"]
        return {e["name"] for e in events if e.get("ph") == "X"}

    assert {"heron.generate", "heron.train", "heron.push_weights"} <= names("")
    for rank in ("trainer-rank-0.", "trainer-rank-1."):
        assert {"aten::mm", "autograd::engine::evaluate_function: MmBackward0"} <= names(rank)  # forward, backward
    assert any(n.startswith(("aten::", "mkldnn::")) for n in names("engine-0."))
    assert "aten::" in (folder / "trainer-rank-0.ops.txt").read_text()


def test_two_ranks_report_the_model_flops_of_every_row_they_trained(no_ray, toy_model_dir, toy_data_path, tmp_path):
    """train/model_flops is both ranks' total: together the two FSDP2 ranks ran the forward and
    backward of every sample (train.skip_zero_advantage=false: every row trains), and
    perf/train_tflops is those FLOPs per second of the train stage. Float32 sums: rel 1e-6."""
    import torch

    from heron.loop import run_rollouts
    from heron.preflight.meta_model import meta_model
    from heron.trainer.model_flops import forward_cost

    batches = []
    cfg = _config(toy_model_dir, toy_data_path, tmp_path, 2, "eval.interval=0", "train.skip_zero_advantage=false")
    try:
        with RLRun(cfg) as run:
            records = run_rollouts(run, lambda batch, record: batches.append(batch))
    finally:
        ray.shutdown()
    cost = forward_cost(meta_model(str(toy_model_dir)))
    for batch, record in zip(batches, records, strict=True):
        lengths = torch.tensor([len(s.prompt_tokens) + len(s.response_tokens) for s in batch.samples])
        assert record["train/model_flops"] == pytest.approx(float(cost.training(lengths)), rel=1e-6)
        assert record["perf/train_tflops"] == pytest.approx(record["train/model_flops"] / record["time/train_s"] / 1e12)


def test_bf16_fsdp2_ranks_sleep_between_turns_and_resume_exactly(no_ray, toy_model_dir, toy_data_path, tmp_path):
    """train.precision=bf16 on two colocated FSDP2 ranks (weights gathered in bf16,
    heron.parallel.data_parallel): the ranks sleep and wake around each turn, save their float32
    shards, and a run resumed from rollout 0's checkpoint gives the straight run's rollout 1 bit
    for bit (the same operations in the same order: tests/tolerance.py, rule 1)."""
    import shutil

    from heron.tracking.metrics_file import read_jsonl
    from tests.run_compare import comparable

    extra = ("train.precision=bf16", "run.allow_emulated_bf16=true", "eval.interval=0", "checkpoint.interval=1")
    try:
        train(_config(toy_model_dir, toy_data_path, tmp_path / "straight", 2, *extra))
        checkpoint = Path("checkpoints") / "rollout-000000"
        shutil.copytree(tmp_path / "straight" / checkpoint, tmp_path / "resumed" / checkpoint)
        train(_config(toy_model_dir, toy_data_path, tmp_path / "resumed", 2, *extra))
    finally:
        ray.shutdown()
    straight, resumed = (read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("straight", "resumed"))
    assert straight[-1]["memory/trainer-rank-1_released_bytes"] > 0  # the second rank slept
    assert [r["rollout_id"] for r in resumed] == [1]
    assert comparable(resumed[0]) == comparable(straight[1])
