"""Faults on a real Ray cluster: a hung or killed engine actor, a killed trainer rank, and a
placement group the cluster cannot hold. Each must fail with an error naming the actor (or the
sizes), and leave no actor behind.

No wall-clock bounds (tests/tolerance.py, rule 5): a hung actor must time out after
``cluster.call_timeout_s`` (short, so the test waits little); a dead one must be reported as
dead, which with a call deadline only a hang reaches (``HANG_S``) proves it surfaced before
any deadline, however loaded the machine."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import ray

from heron.checkpoint.reader import find_latest
from heron.cluster.errors import ClusterError
from heron.build import trainer_spec
from heron.trainer.build import build_trainer
from heron.config.base import to_dict
from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.tolerance import HANG_S, RAY_START

HUNG_TIMEOUT_S = 6  # the call deadline a hung actor must run into

pytestmark = pytest.mark.portability


def _config(toy_model_dir, toy_data_path, tmp_path, *extra, call_timeout_s=HANG_S):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        "rollout.num_rollouts=2", "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4",
        "train.micro_batch_size=2", "tracking.progress=false", "checkpoint.enabled=false", "tracking.summary=false",
        "cluster.backend=ray", "cluster.cpus_per_bundle=0.5", f"cluster.call_timeout_s={call_timeout_s}",
        RAY_START, *extra,
    ])


def _pid(actor_ref) -> int:
    return ray.get(actor_ref.handle.pid.remote(), timeout=HANG_S)


def _assert_all_gone(actors) -> None:
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.handle.pid.remote(), timeout=HANG_S)


def test_engine_killed_mid_rollout_names_it_and_the_last_checkpoint_loads(
    ray_session, toy_model_dir, toy_data_path, tmp_path
):
    cfg = _config(toy_model_dir, toy_data_path, tmp_path, "checkpoint.enabled=true", "checkpoint.interval=1")
    with pytest.raises(ClusterError, match=r"engine-0 died during 'generate'"):
        with RLRun(cfg) as run:
            actors = list(run.c.executor.actors)
            run.train(run.advantages(run.reward(run.generate(0))))
            run.push_weights()
            run.checkpoint(0)
            engine_pid = _pid(run.c.engine.engines[0])
            os.kill(engine_pid, signal.SIGSTOP)  # frozen: the generate call below cannot finish
            threading.Timer(1.0, os.kill, (engine_pid, signal.SIGKILL)).start()  # dies mid-call
            run.generate(1)
    _assert_all_gone(actors)
    checkpoint = find_latest(tmp_path / "checkpoints")
    assert checkpoint is not None and checkpoint.rollout_id == 0
    trainer = build_trainer(trainer_spec(cfg))
    trainer.load_state(checkpoint, to_dict(cfg))
    assert trainer.version == 1


def test_hung_engine_times_out_naming_it(ray_session, toy_model_dir, toy_data_path, tmp_path):
    with pytest.raises(ClusterError, match=rf"engine-0: 'generate' did not finish within {HUNG_TIMEOUT_S}s"):
        with RLRun(_config(toy_model_dir, toy_data_path, tmp_path, call_timeout_s=HUNG_TIMEOUT_S)) as run:
            actors = list(run.c.executor.actors)
            os.kill(_pid(run.c.engine.engines[0]), signal.SIGSTOP)  # hung, not dead
            run.generate(0)
    _assert_all_gone(actors)


def test_trainer_rank_killed_names_it(ray_session, toy_model_dir, toy_data_path, tmp_path):
    with pytest.raises(ClusterError, match=r"trainer-rank-1 died during 'train'"):
        with RLRun(_config(toy_model_dir, toy_data_path, tmp_path, "train.world_size=2")) as run:
            actors = list(run.c.executor.actors)
            batch = run.advantages(run.reward(run.generate(0)))
            os.kill(_pid(run.c.trainer.ranks[1]), signal.SIGKILL)
            run.train(batch)  # rank 0 blocks in a collective; rank 1's death must surface first
    _assert_all_gone(actors)
