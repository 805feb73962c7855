"""The trackers beside metrics.jsonl, with the real libraries and no network: TensorBoard event
files, W&B in offline mode and MLflow on a local sqlite store, each read back through its own
reader (tests/tracker_files.py) and compared with metrics.jsonl / eval.jsonl; a resumed run
sends no rollout twice; a tracker that cannot reach its server, or whose store breaks
mid-run, warns once and the run goes on with metrics.jsonl complete."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from heron.loop import run_rollouts, train
from heron.rl_run import RLRun
from heron.tracking.metrics_file import read_jsonl
from tests import tracker_files as tf

SHORT = ["rollout.num_rollouts=2", "eval.interval=0"]  # where only the run going on matters
TRACKERS = ["tracking.tensorboard=true", "tracking.wandb.enabled=true", "tracking.wandb.mode=offline",
            "tracking.mlflow.enabled=true"]


@pytest.fixture(autouse=True)
def isolated_trackers(tmp_path, monkeypatch):
    """W&B's and MLflow's per-user folders and settings inside the test's tmp folder; nothing
    from the environment picks a server."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "MLFLOW_TRACKING_URI",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)  # also undoes what the MLflow backend sets
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    yield
    import wandb

    wandb.teardown()  # stops wandb's service process of this test


@pytest.fixture
def config(run_config, addition_data):
    """A 3-rollout toy run (tests/e2e/conftest.py) with eval of two sets, pass@2 and the plot."""
    return lambda *overrides: run_config(
        "rollout.num_rollouts=3", "rollout.samples_per_prompt=2", "train.micro_batch_size=4", "checkpoint.interval=0",
        f"eval.path={addition_data['test']}", f"eval.sets.hard={addition_data['hard']}", "eval.interval=1",
        "eval.max_new_tokens=4", "eval.samples=2", "tracking.plot=true", *overrides,
    )


def _numeric(record: dict) -> dict:
    """What a tracker gets of a metrics.jsonl record: its numbers, less the eval it repeats."""
    return {k: v for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "rollout_id" and not k.startswith("eval/")}


def _mlflow_run(run_dir):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("heron").experiment_id])
    return client, run


def _wandb_processes() -> list[str]:
    """The running wandb-core processes this test started (wandb's own process, a child)."""
    import psutil

    names = []
    for child in psutil.Process().children(recursive=True):
        try:
            names.append(child.name())
        except psutil.NoSuchProcess:  # ended while listed
            pass
    return [name for name in names if name == "wandb-core"]


def test_each_tracker_holds_the_config_metrics_evals_and_reward_curve(config):
    cfg = config(*TRACKERS)
    train(cfg)
    # wandb's process writes the run's file and closes it when it stops; it must have stopped
    # before the run returned, or the file below may hold its header only (under load it did)
    assert _wandb_processes() == []
    run_dir = Path(cfg.run.dir)
    metrics, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    assert [m["rollout_id"] for m in metrics] == [0, 1, 2] and [e["rollout_id"] for e in evals] == [-1, 0, 1, 2]
    assert {"eval/accuracy", "eval/hard/accuracy", "eval/pass@2", "eval/hard/mean@2"} <= set(evals[0])

    scalars = tf.tensorboard_scalars(run_dir / "tb")
    assert scalars["reward/mean"] == [(m["rollout_id"], pytest.approx(m["reward/mean"], rel=2**-23)) for m in metrics]
    for key in ("eval/accuracy", "eval/hard/accuracy", "eval/pass@2", "eval/hard/mean@2"):
        assert scalars[key] == [(e["rollout_id"], pytest.approx(e[key], rel=2**-23)) for e in evals]  # float32 events

    (wandb_file,) = tf.wandb_offline_runs(run_dir)
    assert tf.wandb_run_config(wandb_file)["rollout"]["num_rollouts"] == 3  # the run config, logged once
    history = tf.wandb_history(wandb_file)
    assert [{k: r[k] for k in _numeric(m)} | {"rollout_id": r["rollout_id"]} for r, m in
            zip([r for r in history if "reward/mean" in r], metrics)] == [{**_numeric(m), "rollout_id": m["rollout_id"]} for m in metrics]
    eval_rows = [r for r in history if "eval/accuracy" in r and "reward/mean" not in r]
    assert [(r["rollout_id"], r["eval/hard/pass@2"]) for r in eval_rows] == [(e["rollout_id"], e["eval/hard/pass@2"]) for e in evals]
    assert tf.wandb_artifacts(wandb_file) == [("reward_curve", "plot", ["reward_curve.png"])]

    client, run = _mlflow_run(run_dir)
    assert run.data.params["rollout.num_rollouts"] == "3" and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward/mean")] == [
        (m["rollout_id"], m["reward/mean"]) for m in metrics]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/hard/pass_at_2")] == [
        (e["rollout_id"], e["eval/hard/pass@2"]) for e in evals]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["reward_curve.png"]


class _Crash(Exception):
    pass


def test_a_resumed_run_continues_each_tracker_without_sending_a_rollout_twice(config):
    """Rollout 2 is logged, then the run dies before its checkpoint (saved after rollout 1): the
    resumed run redoes rollout 2. TensorBoard purges its old events from rollout 2 on; W&B and
    MLflow already hold rollout 2 and are not sent it again (heron.tracking.delivery)."""
    cfg = config(*TRACKERS, "rollout.num_rollouts=4", "checkpoint.interval=2", "eval.interval=2", "eval.sets={}")

    def crash_after_rollout_2(batch, record):
        if record["rollout_id"] == 2:
            raise _Crash()

    with pytest.raises(_Crash):
        with RLRun(cfg) as run:
            run_rollouts(run, crash_after_rollout_2)
    with RLRun(cfg) as run:
        assert run.start_rollout == 2
        run_rollouts(run)
    run_dir = Path(cfg.run.dir)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["rollout_id"] for m in metrics] == [0, 1, 2, 3]

    scalars = tf.tensorboard_scalars(run_dir / "tb")
    assert [step for step, _ in scalars["reward/mean"]] == [0, 1, 2, 3]
    assert [step for step, _ in scalars["eval/accuracy"]] == [-1, 1, 3]

    first, second = tf.wandb_offline_runs(run_dir)
    assert first.stem == second.stem, "the resumed run reopens the same W&B run id"
    assert tf.wandb_run_config(first)["rollout"]["num_rollouts"] == 4 and "rollout" not in tf.wandb_run_config(second)
    rows = [r for f in (first, second) for r in tf.wandb_history(f)]
    assert [r["rollout_id"] for r in rows if "reward/mean" in r] == [0, 1, 2, 3]
    assert [r["rollout_id"] for r in rows if "eval/accuracy" in r] == [-1, 1, 3]

    client, run = _mlflow_run(run_dir)  # one MLflow run across both attempts
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "reward/mean")] == [
        (m["rollout_id"], m["reward/mean"]) for m in metrics]
    assert run.info.status == "FINISHED"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_trackers_warn_once_and_the_run_goes_on(config, monkeypatch, caplog):
    """MLflow at a closed port, W&B online against a closed port with a made-up key: each warns
    one line at start-up; every rollout is in metrics.jsonl."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    cfg = config("tracking.mlflow.enabled=true", f"tracking.mlflow.tracking_uri=http://127.0.0.1:{_closed_port()}",
                 "tracking.wandb.enabled=true", "tracking.wandb.mode=online", "tracking.wandb.init_timeout_s=5", *SHORT)
    with caplog.at_level(logging.WARNING, logger="heron.tracking"):
        train(cfg)
    warnings = [r.getMessage() for r in caplog.records if r.name == "heron.tracking"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("tracking.wandb could not start (") and "\n" not in warnings[0]
    assert warnings[1].startswith("tracking.mlflow could not start (MlflowException: API request to http://127.0.0.1:")
    run_dir = Path(cfg.run.dir)
    assert [m["rollout_id"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    assert not (run_dir / "trackers.json").exists() or "tracking.mlflow" not in (run_dir / "trackers.json").read_text()


def test_a_server_that_never_answers_costs_one_bounded_wait(config, caplog):
    """A socket that accepts connections but never replies: MLflow's request times out
    (tracking.mlflow.request_timeout_s), one warning, and the run goes on."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cfg = config("tracking.mlflow.enabled=true", f"tracking.mlflow.tracking_uri={uri}",
                     "tracking.mlflow.request_timeout_s=1", "tracking.mlflow.max_retries=0", *SHORT)
        with caplog.at_level(logging.WARNING, logger="heron.tracking"):
            train(cfg)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "heron.tracking"]
    assert warning.startswith("tracking.mlflow could not start (") and "ReadTimeoutError" in warning
    assert len(read_jsonl(Path(cfg.run.dir) / "metrics.jsonl")) == 2


def test_a_store_that_breaks_mid_run_warns_once_and_the_run_goes_on(config, caplog):
    """The MLflow sqlite file is replaced by garbage after rollout 0: the next log fails, one
    warning names it, MLflow is off, and rollouts 1 and 2 still reach metrics.jsonl and W&B."""
    cfg = config("tracking.mlflow.enabled=true", "tracking.wandb.enabled=true", "tracking.wandb.mode=offline")
    run_dir = Path(cfg.run.dir)

    def break_the_store(batch, record):
        if record["rollout_id"] == 0:
            (run_dir / "mlflow.db").write_bytes(b"not a database" * 100)

    with caplog.at_level(logging.WARNING, logger="heron.tracking"):
        with RLRun(cfg) as run:
            run_rollouts(run, break_the_store)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "heron.tracking"]
    assert warning.startswith("tracking.mlflow could not log the eval of rollout 1 (")
    assert [m["rollout_id"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2]
    (wandb_file,) = tf.wandb_offline_runs(run_dir)
    assert [r["rollout_id"] for r in tf.wandb_history(wandb_file) if "reward/mean" in r] == [0, 1, 2]


def test_a_users_own_wandb_run_is_neither_taken_over_nor_finished(config, tmp_path):
    """A script that has its own W&B run active around heron's run: heron logs to a run of its
    own, and at its end leaves the user's run (and wandb's process) going; the user's run logs on
    and finishes with its rows."""
    import wandb

    user_dir = tmp_path / "user"
    user_dir.mkdir()
    user_run = wandb.init(project="mine", mode="offline", dir=str(user_dir), reinit="create_new",
                          settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
    user_run.log({"mine": 1.0})
    cfg = config("tracking.wandb.enabled=true", "tracking.wandb.mode=offline", *SHORT)
    train(cfg)
    assert _wandb_processes() == ["wandb-core"]  # kept going for the user's run
    user_run.log({"mine": 2.0})  # still active
    user_run.finish()
    wandb.teardown()  # the user's script ending: wandb's process closes the user's file

    (heron_file,) = tf.wandb_offline_runs(Path(cfg.run.dir))
    assert [r["rollout_id"] for r in tf.wandb_history(heron_file) if "reward/mean" in r] == [0, 1]
    assert all("mine" not in r for r in tf.wandb_history(heron_file))
    (user_file,) = tf.wandb_offline_runs(user_dir)
    assert [r["mine"] for r in tf.wandb_history(user_file) if "mine" in r] == [1.0, 2.0]
