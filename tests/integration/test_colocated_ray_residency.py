"""Colocated actors on real Ray take turns on their bundle (sleep/wake as remote calls).

2 trainer ranks (FSDP2, real gloo) + 1 engine actor, ``colocate: true`` (offload on for both):
the engine shares bundle 0 with trainer rank 0. A spy wraps every transition of the driver's
residency proxies (the real transition runs; the spy then asks every actor for its *real*
state by a remote call), so the invariant "at most one awake component per bundle" is checked
at every point where something woke or slept, including just before each operation runs.

The same run with ``colocate: false`` (disaggregated, no offload, nothing ever sleeps) must give
the same parameters and metrics. Tolerance: bit-exact -- both runs do the same float
operations in the same order (1 thread per actor either way); offload copies bytes out and
back, which is exact.

Fault path: a rank that hangs in a remote sleep gives the ``ClusterError`` naming it when
``cluster.call_timeout_s`` runs out; an engine that dies in a remote wake is reported dead,
under a call deadline only a hang reaches (no wall-clock bound: tests/tolerance.py, rule 5).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import defaultdict

import pytest
import ray
import torch

from heron.cluster.errors import ClusterError
from heron.cluster.remote_call import wait_all
from heron.residency.state import Residency
from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.run_compare import assert_roundoff_mismatch, comparable
from tests.tolerance import HANG_S, RAY_START

HUNG_TIMEOUT_S = 6  # the call deadline a hung rank must run into
IN_TRANSITION = {"waking": {"asleep", "waking", "awake"}, "sleeping": {"awake", "sleeping", "asleep"}}
PASSES = {("asleep", "awake"): "waking", ("awake", "asleep"): "sleeping"}  # a settled-to-settled move's step


def _allowed(before: str, after: str) -> set[str]:
    """The actor states consistent with a proxy read as ``before`` just before the actor's state
    was asked and ``after`` just after: a proxy that moved meanwhile (another thread of the set
    wakes or sleeps it) may have its actor anywhere on the way."""
    states = IN_TRANSITION.get(before, {before}) | IN_TRANSITION.get(after, {after})
    step = PASSES.get((before, after))
    return states | IN_TRANSITION[step] if step else states


def _config(toy_model_dir, toy_data_path, tmp_path, *extra):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", f"eval.path={toy_data_path.parent / 'test.jsonl'}",
        "eval.interval=1", "eval.max_prompts=2", f"run.dir={tmp_path}", "rollout.num_rollouts=2", "rollout.batch_size=4",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8", "train.steps_per_rollout=2",
        "train.micro_batch_size=1", "train.lr=1e-3", "tracking.progress=false", "tracking.summary=false",
        "checkpoint.interval=1", "cluster.backend=ray", RAY_START, "cluster.cpus_per_bundle=0.5", *extra,
    ])


def _score(batch):
    """Varied deterministic rewards (the untrained toy model earns none from the task reward)."""
    for sample in batch.samples:
        sample.reward = float(sum(sample.response_tokens) % 7) / 6
    return batch


def _run(cfg, after_loop=None):
    """The loop's verbs (heron.loop.train) with ``_score`` as the reward, plus rank 0's final
    weights before shutdown."""
    records = []
    with RLRun(cfg) as run:
        run.evaluate(rollout_id=-1)
        for rollout_id in run.rollout_ids():
            batch = run.postprocess(run.advantages(_score(run.generate(rollout_id))))
            train_metrics = run.train(batch)
            run.push_weights()
            records.append(run.log(batch, train_metrics, run.evaluate(rollout_id)))
            run.checkpoint(rollout_id)
        if after_loop is not None:
            after_loop(run)
        weights = {k: v.clone() for k, v in run.c.trainer.host_weights().items()}
    return records, weights


@pytest.fixture
def transitions(monkeypatch):
    """Every transition of a driver proxy, with the real states of all actors right after it:
    (actor, state it reached, {bundle: [actors not asleep there]})."""
    log = []
    original = Residency._transition  # on the driver, every Residency is an actor proxy

    def spied(self, during, after, action):
        original(self, during, after, action)
        members = self.coordinator.members
        actors = [m.backend.actor for m in members]
        proxies_before = [m.state.value for m in members]
        real = wait_all([(a, a.submit_host("residency_state")) for a in actors], "residency_state", HANG_S)
        proxies_after = [m.state.value for m in members]
        awake = defaultdict(list)
        for member, state, was, now in zip(members, real, proxies_before, proxies_after):
            # a set wakes its actors concurrently: a proxy in transition may already have its
            # actor on either side of it, and another member's proxy may move while its actor is
            # asked; a proxy settled throughout must agree with its actor exactly
            assert state in _allowed(was, now), f"{member.name}: proxy says {was} then {now}, actor {state}"
            if state != "asleep":
                awake[member.device_key].append(member.name)
        log.append((self.name, after.value, dict(awake)))

    monkeypatch.setattr(Residency, "_transition", spied)
    return log


def _eval_with_trainer_awake(run) -> None:
    """A trainer left awake (not resting asleep): the engine's wake must sleep rank 0, which
    shares its bundle, and leave rank 1 (alone on bundle 1) awake."""
    run.c.trainer.wake()
    run.evaluate(rollout_id=run.cfg.rollout.num_rollouts - 1)


def test_colocated_actors_take_turns_and_match_disaggregated(ray_session, toy_model_dir, toy_data_path, tmp_path, transitions):
    colocated_cfg = _config(toy_model_dir, toy_data_path, tmp_path / "colocated", "colocate=true", "train.world_size=2")
    colocated, colocated_weights = _run(colocated_cfg, after_loop=_eval_with_trainer_awake)
    end = [(name, state) for name, state, _ in transitions[-5:]]
    assert sorted(end[:2]) == [("trainer-rank-0", "awake"), ("trainer-rank-1", "awake")], end  # woken concurrently
    assert end[2:] == [("trainer-rank-0", "asleep"), ("engine-0", "awake"), ("engine-0", "asleep")], end
    assert transitions[-2][2] == {"bundle-0": ["engine-0"], "bundle-1": ["trainer-rank-1"]}
    assert transitions, "no actor ever slept or woke"
    crowded = [entry for entry in transitions if any(len(names) > 1 for names in entry[2].values())]
    assert crowded == [], f"two components awake on one bundle: {crowded[:3]}"
    woke = defaultdict(int)
    for name, state, _ in transitions:
        woke[name] += state == "awake"
    # engine: initial eval + per rollout (generate, load_weights, eval); ranks: train + checkpoint per rollout
    assert woke["engine-0"] >= 7 and woke["trainer-rank-0"] >= 4 and woke["trainer-rank-1"] >= 4, dict(woke)
    for record in colocated:  # the actors' accounting: all released at rest
        assert record["memory/engine-0_device_bytes"] == 0 and record["memory/engine-0_released_bytes"] > 0
        for rank in (0, 1):
            assert record[f"memory/trainer-rank-{rank}_device_bytes"] == 0
            assert record[f"memory/trainer-rank-{rank}_optimizer_bytes"] == 0
            assert record[f"memory/trainer-rank-{rank}_released_bytes"] > 0

    transitions.clear()
    apart_cfg = _config(toy_model_dir, toy_data_path, tmp_path / "apart", "colocate=false", "train.world_size=2")
    apart, apart_weights = _run(apart_cfg)
    assert transitions == []  # no offload: nothing sleeps
    assert apart[-1]["memory/trainer-rank-0_device_bytes"] > 0
    assert apart[-1]["memory/trainer-rank-0_released_bytes"] == 0
    for ours, theirs in zip(colocated, apart):
        assert comparable(ours) == comparable(theirs)
    assert_roundoff_mismatch(colocated, colocated_cfg)  # the mismatch (equal above) is round-off only
    assert_roundoff_mismatch(apart, apart_cfg)
    assert colocated[-1]["train/grad_norm"] > 0  # it trained on something
    assert colocated_weights.keys() == apart_weights.keys()
    for name, tensor in colocated_weights.items():
        assert torch.equal(tensor, apart_weights[name]), name


def _pid(actor) -> int:
    return ray.get(actor.handle.pid.remote(), timeout=HANG_S)


def _hung_rank_in_remote_sleep(run) -> None:
    run.c.trainer.wake()  # rank 0 awake on bundle 0: the engine's wake must put it to sleep first
    os.kill(_pid(run.c.trainer.ranks[0]), signal.SIGSTOP)  # hung: the remote sleep cannot finish
    with pytest.raises(ClusterError, match=rf"trainer-rank-0: 'sleep \(residency\)' did not finish within {HUNG_TIMEOUT_S}s"):
        run.generate(0)
    assert run.c.trainer.residency_state.value == "failed"


def _engine_dies_in_remote_wake(run) -> None:
    engine_pid = _pid(run.c.engine.engines[0])
    os.kill(engine_pid, signal.SIGSTOP)
    threading.Timer(1.0, os.kill, (engine_pid, signal.SIGKILL)).start()  # dies while the wake waits
    with pytest.raises(ClusterError, match=r"engine-0 died during 'wake \(residency\)'"):
        run.generate(0)
    assert run.c.engine.residency_state.value == "failed"


@pytest.mark.portability
@pytest.mark.parametrize(
    "fault, call_timeout_s",
    [(_hung_rank_in_remote_sleep, HUNG_TIMEOUT_S), (_engine_dies_in_remote_wake, HANG_S)], ids=["hung-sleep", "dead-wake"],
)
def test_dead_or_hung_actor_in_a_remote_sleep_or_wake_is_named(
    ray_session, toy_model_dir, toy_data_path, tmp_path, fault, call_timeout_s
):
    cfg = _config(toy_model_dir, toy_data_path, tmp_path, "colocate=true", "checkpoint.enabled=false",
                  f"cluster.call_timeout_s={call_timeout_s}")
    with RLRun(cfg) as run:
        actors = list(run.c.executor.actors)
        fault(run)
    for actor in actors:  # the run's exit stopped every actor, also the hung one
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.handle.pid.remote(), timeout=HANG_S)
