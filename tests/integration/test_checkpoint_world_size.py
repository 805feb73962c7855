"""Resume across world sizes: trainer state saved by 2 FSDP2 ranks loads into 1 process and
vice versa (DCP reshards), and training on gives the parameters of an uninterrupted run.

Fixed synthetic batches (random tokens, advantages and loss masks) keep this about the
trainer state alone. Tolerance atol 1e-5, for the reason given in test_data_parallel.py:
the sharded run sums gradients in another order.
"""

from __future__ import annotations

import random

import pytest
import torch

from heron.cluster.ray_executor import RayExecutor
from heron.components import build_policy_trainer
from heron.config.root import load_config
from heron.parallel.train_state import load_train_state, save_train_state
from heron.records import Sample
from heron.rl_run import RLRun
from heron.trainer.batch import collate
from heron.weights.wire import from_wire


def _config(toy_model_dir, tmp_path, world_size):
    cluster = ["cluster.backend=ray", "cluster.cpus_per_bundle=0.5", "colocate=true"] if world_size > 1 else []
    return load_config(None, [
        f"model.path={toy_model_dir}", "data.path=unused.jsonl", f"run.dir={tmp_path}",
        "rollout.num_rollouts=2", "rollout.batch_size=4", "rollout.samples_per_prompt=2",
        "train.steps_per_rollout=2", "train.micro_batch_size=1", "train.lr=1e-3",
        f"train.world_size={world_size}", "checkpoint.enabled=false", *cluster,
    ])


def _batch(rollout_id: int):
    rng = random.Random(rollout_id)
    samples = []
    for k in range(8):
        response = [rng.randrange(3, 200) for _ in range(rng.randint(2, 6))]
        samples.append(Sample(
            rollout_id=rollout_id, prompt_id=k // 2, sample_index=k % 2, policy_version=rollout_id,
            prompt_tokens=[rng.randrange(3, 200) for _ in range(3)], response_tokens=response,
            response_logprobs=[0.0] * len(response), loss_mask=[1] * (len(response) - k % 2) + [0] * (k % 2),
            response_text="", finish_reason="length", reward=0.0, advantage=rng.uniform(-1, 1),
        ))
    return collate(samples, pad_token_id=0)


def _weights(state) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in from_wire(state).items()}


@pytest.fixture(scope="module")
def uninterrupted(toy_model_dir, tmp_path_factory):
    trainer = build_policy_trainer(_config(toy_model_dir, tmp_path_factory.mktemp("ref"), 1))
    trainer.train(_batch(0))
    trainer.train(_batch(1))
    return _weights(trainer.weights())


def _assert_same(weights, reference):
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, reference[name], atol=1e-5, rtol=0)


def test_two_ranks_to_one(ray_session, toy_model_dir, tmp_path, uninterrupted):
    executor = RayExecutor(_config(toy_model_dir, tmp_path, 2))
    try:
        group = executor.trainer()
        group.train(_batch(0))
        group.save_state(str(tmp_path / "ckpt"))
    finally:
        executor.close()
    trainer = build_policy_trainer(_config(toy_model_dir, tmp_path, 1))
    assert load_train_state(trainer, tmp_path / "ckpt") == 1
    trainer.train(_batch(1))
    _assert_same(_weights(trainer.weights()), uninterrupted)


def test_one_process_to_two_ranks(ray_session, toy_model_dir, tmp_path, uninterrupted):
    trainer = build_policy_trainer(_config(toy_model_dir, tmp_path, 1))
    trainer.train(_batch(0))
    save_train_state(trainer, tmp_path / "ckpt")
    executor = RayExecutor(_config(toy_model_dir, tmp_path, 2))
    try:
        group = executor.trainer()
        assert group.load_state(str(tmp_path / "ckpt")) == 1
        group.train(_batch(1))
        weights = _weights(group.weights())
    finally:
        executor.close()
    _assert_same(weights, uninterrupted)


# --- run-level checkpoints (heron.checkpoint) on the Ray backend -------------------------------

def _run_config(toy_model_dir, toy_data_path, run_dir, world_size, num_rollouts):
    cluster = ["cluster.backend=ray", "cluster.cpus_per_bundle=0.5", "colocate=false"] if world_size > 1 else []
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={run_dir}",
        f"rollout.num_rollouts={num_rollouts}", "rollout.batch_size=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=4", "train.micro_batch_size=2", "train.lr=1e-3", f"train.world_size={world_size}",
        "train.weight_decay=0.1",  # the untrained toy earns no reward: decay makes every step move the weights
        "checkpoint.interval=1", "tracking.progress=false", "tracking.summary=false", *cluster,
    ])


def _train_and_weights(cfg) -> tuple[dict, int]:
    with RLRun(cfg) as run:
        for rollout_id in run.rollout_ids():
            batch = run.advantages(run.reward(run.generate(rollout_id)))
            run.train(batch)
            run.push_weights()
            run.checkpoint(rollout_id)
        trainer = run.c.trainer
        weights = trainer.gather_weights() if hasattr(trainer, "gather_weights") else trainer.weights()
        return _weights(weights), run.start_rollout


def _assert_trained(weights, toy_model_dir) -> None:
    from heron.components import load_model

    initial = load_model(str(toy_model_dir), "float32").state_dict()
    assert any(not torch.equal(weights[k], initial[k]) for k in weights), "training did not move the weights"


def test_run_checkpoint_of_two_ranks_resumes_in_one_process(ray_session, toy_model_dir, toy_data_path, tmp_path):
    saved, _ = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 2, num_rollouts=2))
    _assert_trained(saved, toy_model_dir)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("rollout-*")) == ["rollout-000000", "rollout-000001"]
    resumed, start = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 1, num_rollouts=2))
    assert start == 2  # resumed after the last checkpoint: nothing left to run
    for name, tensor in saved.items():
        assert torch.equal(resumed[name], tensor), name  # a DCP round trip is exact


def test_run_checkpoint_of_one_process_resumes_on_two_ranks(ray_session, toy_model_dir, toy_data_path, tmp_path):
    saved, _ = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 1, num_rollouts=1))
    _assert_trained(saved, toy_model_dir)
    resumed, start = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 2, num_rollouts=1))
    assert start == 1
    for name, tensor in resumed.items():
        assert torch.equal(tensor, saved[name]), name
