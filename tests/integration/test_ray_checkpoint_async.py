"""Async checkpoints and ``checkpoint.hf_export`` on the Ray backend (2 FSDP2 ranks).

- The save returns once every rank staged its shards; a rank's write is then held open
  (instrumentation in the actor, ``_checkpoint_gate``) and the run trains on meanwhile; the
  checkpoint is committed only after the write finishes, and holds the weights of the save,
  not the ones trained after it (the staging copied them).
- ``hf/`` of a Ray checkpoint (sync and async) loads with ``AutoModelForCausalLM.from_pretrained``
  and equals the gathered weights at the save.
- A rank's failed background write surfaces in the loop as ``AsyncSaveError`` naming the
  checkpoint, and leaves no committed folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from heron.checkpoint.errors import AsyncSaveError
from heron.checkpoint.layout import committed, leftovers
from heron.checkpoint.reader import find_latest
from heron.checkpoint.writer import CheckpointWriter
from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.integration._checkpoint_gate import hold_writes_until, shift_weights
from tests.toy_run import toy_run_overrides

DEADLINE_S = 120  # hang guard for the gate handshake only


def _config(toy_model_dir, toy_data_path, tmp_path):
    return load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, tmp_path, "rollout.num_rollouts=3", "cluster.backend=ray", "train.world_size=2",
        "colocate=true", "checkpoint.interval=1", "checkpoint.async=true", "checkpoint.hf_export=true",
        "checkpoint.keep_last=0",
        "cluster.collective_timeout_s=120",  # a failing test must not wait the default 300 s per collective
    ))


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {DEADLINE_S}s"
        time.sleep(0.02)


def _rollout(run, rollout_id):
    run.train(run.advantages(run.reward(run.generate(rollout_id))))
    run.push_weights()


def _assert_hf_matches(checkpoint: Path, weights: dict) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint / "hf")
    state = model.state_dict()
    for name, value in weights.items():
        assert torch.equal(state[name], _tensor(value)), name


def _tensor(value) -> torch.Tensor:
    return torch.from_numpy(np.array(value))  # a writable copy of an object-store array


def test_async_save_on_ray_writes_in_the_background_and_exports_hf(ray_session, toy_model_dir, toy_data_path, tmp_path):
    cfg = _config(toy_model_dir, toy_data_path, tmp_path)
    folder = tmp_path / "checkpoints"
    with RLRun(cfg) as run:
        ranks = run.c.trainer.ranks
        _rollout(run, 0)
        saved = run.c.trainer.gather_weights()
        gate = tmp_path / "gate"
        ray_session.get(ranks[0].submit_host("apply", hold_writes_until, str(gate)))
        run.checkpoint(0)  # returns after staging, although rank 0's write is held
        _wait_for(gate.with_suffix(".entered"))
        assert committed(folder) == [] and len(leftovers(folder)) == 1
        run.c.trainer.apply_all(shift_weights, 0.5)  # the live weights change after the staging
        _rollout(run, 1)  # the ranks train (and all-gather) while rank 0's io thread is held
        trained = run.c.trainer.gather_weights()
        assert all(not torch.equal(_tensor(saved[k]), _tensor(trained[k])) for k in saved)
        assert committed(folder) == []
        gate.touch()
        assert run.checkpointer.writer.wait() == folder / "rollout-000000"
        sync = CheckpointWriter(tmp_path / "sync", async_save=False, hf_export=True, tokenizer=run.c.tokenizer)
        run.c.trainer.save_checkpoint(sync, 1, run.checkpointer.run_state(1, run.c))  # sync on Ray: hf/ too
        run.checkpoint(1)  # still being written when the run exits: flushed by the exit path
    assert [p.name for p in committed(folder)] == ["rollout-000001", "rollout-000000"] and leftovers(folder) == []
    assert find_latest(folder).rollout_id == 1
    _assert_hf_matches(folder / "rollout-000001", trained)
    _assert_hf_matches(folder / "rollout-000000", saved)  # the weights of the save, not the later ones
    _assert_hf_matches(tmp_path / "sync" / "rollout-000001", trained)
    assert find_latest(tmp_path / "sync").rollout_id == 1


def test_failed_background_write_on_a_rank_surfaces_in_the_loop(ray_session, toy_model_dir, toy_data_path, tmp_path):
    cfg = _config(toy_model_dir, toy_data_path, tmp_path)
    folder = tmp_path / "checkpoints"
    with pytest.raises(AsyncSaveError, match=r"^async checkpoint save of rollout-000000 failed: CheckpointError: trainer rank 1 could not write its "
                       r"shards: OSError: \[Errno 28\] No space left on device \(injected by the test\)$"):
        with RLRun(cfg) as run:
            _rollout(run, 0)
            gate = tmp_path / "gate"
            gate.touch()  # open: the write fails at once
            ray_session.get(run.c.trainer.ranks[1].submit_host("apply", hold_writes_until, str(gate), True))
            run.checkpoint(0)
            _rollout(run, 1)
            run.checkpoint(1)  # the next save raises the first one's error
    assert committed(folder) == []
