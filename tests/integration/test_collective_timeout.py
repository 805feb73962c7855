"""``cluster.collective_timeout_s`` on real Ray actors and gloo: a trainer rank that hangs
(SIGSTOP) while the other waits for it in a collective gives a ``ClusterError`` naming the
hung rank once the collective deadline passes -- not after ``cluster.call_timeout_s``."""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray

from heron.cluster.errors import ClusterError
from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.tolerance import HANG_S, RAY_START
from tests.toy_run import toy_run_overrides

# The collective deadline also bounds the start-up collectives (rendezvous, the first weight
# gather), where ranks of a loaded machine arrive seconds apart: 5 s failed there under
# `make test-portability`'s busy load. 30 s leaves that skew room and stays far below the call
# deadline, which the error must not wait for.
COLLECTIVE_TIMEOUT_S = 30
pytestmark = pytest.mark.portability
CALL_TIMEOUT_S = HANG_S


def _config(toy_model_dir, toy_data_path, tmp_path):
    return load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, tmp_path, "rollout.num_rollouts=1", "checkpoint.enabled=false",
        "cluster.backend=ray", RAY_START, "train.world_size=2",
        "colocate=false",  # no residency calls: train goes straight to its collectives
        f"cluster.collective_timeout_s={COLLECTIVE_TIMEOUT_S}", f"cluster.call_timeout_s={CALL_TIMEOUT_S}",
    ))


def test_rank_hung_in_a_collective_is_named_within_the_collective_deadline(ray_session, toy_model_dir, toy_data_path, tmp_path):
    with pytest.raises(ClusterError) as error:
        with RLRun(_config(toy_model_dir, toy_data_path, tmp_path)) as run:
            batch = run.advantages(run.reward(run.generate(0)))
            hung = run.c.trainer.ranks[1]
            os.kill(ray.get(hung.handle.pid.remote(), timeout=30), signal.SIGSTOP)  # rank 0 waits for it in train
            start, elapsed = time.monotonic(), None
            try:
                run.train(batch)
            finally:
                elapsed = time.monotonic() - start
    message = str(error.value)
    assert elapsed is not None, f"the run failed before train, during start-up or generate: {message}"
    print(f"collective timeout surfaced after {elapsed:.1f}s (deadline {COLLECTIVE_TIMEOUT_S}s): {message}")
    assert message.startswith(
        "trainer-rank-0: a collective in 'train' did not complete within cluster.collective_timeout_s: "
        f"trainer-rank-1 never joined (hung or dead); Timed out waiting {COLLECTIVE_TIMEOUT_S * 1000}ms"
    ), message
    assert elapsed < CALL_TIMEOUT_S / 2, f"{elapsed:.1f}s: the call deadline, not the collective one, was waited"
