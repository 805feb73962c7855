"""Resume across world sizes: trainer state saved by 2 FSDP2 ranks loads into 1 process and
vice versa (DCP reshards), and training on gives the parameters of an uninterrupted run.

Fixed synthetic batches (random tokens, advantages and loss masks) keep this about the
trainer state alone. The sharded run sums gradients in another order, so trained state is
compared with the derived bound of tests/tolerance.py (rule 3, AdamW with eps = grad_clip = 1,
as in test_data_parallel.py): parameters and both Adam moments after loading, parameters
after training on. What DCP only copies (a load followed by a save) is compared bit-exactly.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict
from transformers import AutoConfig

from heron.cluster.ray_executor import RayExecutor
from heron.components import build_policy_trainer, load_model
from heron.config.root import load_config
from heron.parallel.train_state import load_train_state, save_train_state
from heron.records import Sample
from heron.rl_run import RLRun
from heron.trainer.batch import collate
from heron.weights.wire import from_wire
from tests.tolerance import RAY_START, assert_updates_close, reduction_length

STEPS_PER_ROLLOUT = 2


def _config(toy_model_dir, tmp_path, world_size):
    cluster = ["cluster.backend=ray", "cluster.cpus_per_bundle=0.5", "colocate=true", RAY_START] if world_size > 1 else []
    return load_config(None, [
        f"model.path={toy_model_dir}", "data.path=unused.jsonl", f"run.dir={tmp_path}",
        "rollout.num_rollouts=2", "rollout.batch_size=4", "rollout.samples_per_prompt=2",
        f"train.steps_per_rollout={STEPS_PER_ROLLOUT}", "train.micro_batch_size=1", "train.lr=0.1", "train.eps=1",
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


def _state(trainer) -> dict[str, torch.Tensor]:
    """Parameters and Adam moments of a one-process trainer, copied (state dicts share memory)."""
    model, optim = get_state_dict(trainer.model, trainer.optimizer)
    state = {f"param/{k}": v.detach().clone() for k, v in model.items()}
    for fqn, moments in optim["state"].items():
        state.update({f"{key}/{fqn}": moments[key].clone() for key in ("exp_avg", "exp_avg_sq")})
    return state


@pytest.fixture(scope="module")
def uninterrupted(toy_model_dir, tmp_path_factory):
    """Initial parameters (and zero moments), the state after rollout 0, the weights after
    rollout 1. (No ``_state`` before the first step: get_state_dict initialises an empty
    optimizer by taking a step, which would shift Adam's step count.)"""
    trainer = build_policy_trainer(_config(toy_model_dir, tmp_path_factory.mktemp("ref"), 1))
    trainer.train(_batch(0))
    after_0 = _state(trainer)
    trainer.train(_batch(1))
    params = load_model(str(toy_model_dir), "float32").state_dict()
    initial = {k: params[k.split("/", 1)[1]] if k.startswith("param/") else torch.zeros_like(v) for k, v in after_0.items()}
    return {"initial": initial, "after_0": after_0, "after_1": _weights(trainer.weights())}


def _n(toy_model_dir) -> int:
    return reduction_length(AutoConfig.from_pretrained(toy_model_dir), tokens=len(_batch(0)) * _batch(0).input_ids.shape[1])


def _assert_trained_alike(weights, uninterrupted, toy_model_dir):
    initial = load_model(str(toy_model_dir), "float32").state_dict()
    assert_updates_close(weights, uninterrupted["after_1"], initial, n=_n(toy_model_dir), steps=2 * STEPS_PER_ROLLOUT)


@pytest.mark.portability
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
    # resharded parameters and moments are those of one process after the same steps
    assert_updates_close(_state(trainer), uninterrupted["after_0"], uninterrupted["initial"],
                         n=_n(toy_model_dir), steps=STEPS_PER_ROLLOUT)
    trainer.train(_batch(1))
    _assert_trained_alike(_weights(trainer.weights()), uninterrupted, toy_model_dir)


@pytest.mark.portability
def test_one_process_to_two_ranks(ray_session, toy_model_dir, tmp_path, uninterrupted):
    trainer = build_policy_trainer(_config(toy_model_dir, tmp_path, 1))
    trainer.train(_batch(0))
    save_train_state(trainer, tmp_path / "ckpt")
    executor = RayExecutor(_config(toy_model_dir, tmp_path, 2))
    try:
        group = executor.trainer()
        assert group.load_state(str(tmp_path / "ckpt")) == 1
        group.save_state(str(tmp_path / "resaved"))  # loaded into shards and saved again: a copy
        group.train(_batch(1))
        weights = _weights(group.weights())
    finally:
        executor.close()
    resaved = build_policy_trainer(_config(toy_model_dir, tmp_path, 1))
    assert load_train_state(resaved, tmp_path / "resaved") == 1
    expected = _state(trainer)
    for name, tensor in _state(resaved).items():
        assert torch.equal(tensor, expected[name]), name
    _assert_trained_alike(weights, uninterrupted, toy_model_dir)


# --- run-level checkpoints (heron.checkpoint) on the Ray backend -------------------------------

def _run_config(toy_model_dir, toy_data_path, run_dir, world_size, num_rollouts):
    cluster = ["cluster.backend=ray", "cluster.cpus_per_bundle=0.5", "colocate=false", RAY_START] if world_size > 1 else []
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
