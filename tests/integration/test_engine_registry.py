"""A new rollout engine backend is one file plus one registry line (docs/engines.md): the loop,
the generator, the evaluator and the weight push drive it through the ``RolloutEngine``
protocol alone."""

from __future__ import annotations

import pytest
import torch

import heron.build
from heron.config.base import ConfigError
from heron.config.root import load_config
from heron.loop import run_rollouts
from heron.residency import host_only, undeclared_operations
from heron.rl_run import RLRun
from heron.rollout.engine import RolloutEngine
from heron.rollout.registry import ENGINE_BUILDERS, register_engine
from tests.fixtures.engines.echo_engine import EchoEngine

NUM_ROLLOUTS = 3


@pytest.fixture
def echo_registered():
    register_engine("echo", "tests.fixtures.engines.echo_engine:build_echo_engine")
    yield
    ENGINE_BUILDERS.pop("echo")


def _config(toy_model_dir, toy_data_path, tmp_path, *extra):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"eval.path={toy_data_path}", "eval.max_prompts=4",
        "eval.interval=1", f"run.dir={tmp_path}", f"rollout.num_rollouts={NUM_ROLLOUTS}", "rollout.batch_size=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=3", "train.micro_batch_size=4",
        "tracking.progress=false", "tracking.summary=false", "checkpoint.enabled=false", "reward.fn=numeric_match", *extra,
    ])


def test_a_registered_engine_runs_the_loop(echo_registered, toy_model_dir, toy_data_path, tmp_path):
    assert isinstance(EchoEngine(), RolloutEngine) and undeclared_operations(EchoEngine) == []
    with RLRun(_config(toy_model_dir, toy_data_path, tmp_path, "engine.kind=echo")) as run:
        records = run_rollouts(run)
        engine, trainer_weights = run.c.engine, run.c.trainer.host_weights()
    assert [r["rollout_id"] for r in records] == list(range(NUM_ROLLOUTS))
    assert [version for version, _ in engine.pushes] == [1, 2, 3]  # one push per rollout, versioned
    last = engine.pushes[-1][1]
    assert all(torch.equal(last[name], tensor) for name, tensor in trainer_weights.items())
    assert all(r["policy_version"] == r["rollout_id"] + 1 for r in records)


def test_an_unknown_engine_kind_fails_before_anything_loads(toy_model_dir, toy_data_path, tmp_path):
    with pytest.raises(ConfigError, match=r"engine.kind='nope' is not a registered engine; use one of .*embedded"):
        RLRun(_config(toy_model_dir, toy_data_path, tmp_path, "engine.kind=nope"))


class _ClosingEngine(EchoEngine):
    closed = False

    @host_only
    def close(self) -> None:
        self.closed = True


def test_a_build_that_fails_after_the_engine_closes_it(toy_model_dir, toy_data_path, tmp_path, monkeypatch):
    """A server engine must not outlive a run whose trainer failed to build (the server would
    otherwise run until the interpreter exits)."""
    built: list[_ClosingEngine] = []
    register_engine("closing", lambda spec: built.append(_ClosingEngine()) or built[-1])

    def failing_trainer_spec(cfg):
        raise RuntimeError("trainer build failed")

    monkeypatch.setattr(heron.build, "trainer_spec", failing_trainer_spec)
    try:
        with pytest.raises(RuntimeError, match="trainer build failed"):
            RLRun(_config(toy_model_dir, toy_data_path, tmp_path, "engine.kind=closing"))
    finally:
        ENGINE_BUILDERS.pop("closing")
    assert len(built) == 1 and built[0].closed
