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

from heron.build import build_executor, trainer_spec
from heron.checkpoint.fingerprint import config_fingerprint
from heron.checkpoint.reader import open_checkpoint
from heron.checkpoint.writer import CheckpointWriter
from heron.config.base import to_dict
from heron.config.root import load_config
from heron.loop import run_rollouts
from heron.models import load_model
from heron.records import Sample
from heron.rl_run import RLRun
from heron.trainer.batch import collate
from heron.trainer.build import build_trainer
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
    return {k: v.clone() for k, v in state.items()}


def _trainer(cfg):
    return build_trainer(trainer_spec(cfg))


def _save(trainer, folder, cfg):
    """The trainer's state through the one save path (the run's CheckpointWriter), sync."""
    CheckpointWriter(folder, async_save=False).save(0, trainer, {"fingerprint": {"config": config_fingerprint(to_dict(cfg))}})
    return open_checkpoint(folder / "rollout-000000")


def _load(trainer, checkpoint, cfg) -> int:
    return trainer.load_state(checkpoint, to_dict(cfg)).version


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
    trainer = _trainer(_config(toy_model_dir, tmp_path_factory.mktemp("ref"), 1))
    trainer.train(_batch(0))
    after_0 = _state(trainer)
    trainer.train(_batch(1))
    params = load_model(str(toy_model_dir), "float32").state_dict()
    initial = {k: params[k.split("/", 1)[1]] if k.startswith("param/") else torch.zeros_like(v) for k, v in after_0.items()}
    return {"initial": initial, "after_0": after_0, "after_1": _weights(trainer.host_weights())}


def _n(toy_model_dir) -> int:
    return reduction_length(AutoConfig.from_pretrained(toy_model_dir), tokens=len(_batch(0)) * _batch(0).input_ids.shape[1])


def _assert_trained_alike(weights, uninterrupted, toy_model_dir):
    initial = load_model(str(toy_model_dir), "float32").state_dict()
    assert_updates_close(weights, uninterrupted["after_1"], initial, n=_n(toy_model_dir), steps=2 * STEPS_PER_ROLLOUT)


@pytest.mark.portability
def test_two_ranks_to_one(ray_session, toy_model_dir, tmp_path, uninterrupted):
    cfg = _config(toy_model_dir, tmp_path, 2)
    executor = build_executor(cfg)
    try:
        group = executor.trainer(trainer_spec(cfg))
        group.train(_batch(0))
        checkpoint = _save(group, tmp_path / "ckpt", cfg)
    finally:
        executor.close()
    one = _config(toy_model_dir, tmp_path, 1)
    trainer = _trainer(one)
    assert _load(trainer, checkpoint, one) == trainer.version == 1
    # resharded parameters and moments are those of one process after the same steps
    assert_updates_close(_state(trainer), uninterrupted["after_0"], uninterrupted["initial"],
                         n=_n(toy_model_dir), steps=STEPS_PER_ROLLOUT)
    trainer.train(_batch(1))
    _assert_trained_alike(_weights(trainer.host_weights()), uninterrupted, toy_model_dir)


@pytest.mark.portability
def test_one_process_to_two_ranks(ray_session, toy_model_dir, tmp_path, uninterrupted):
    one = _config(toy_model_dir, tmp_path, 1)
    trainer = _trainer(one)
    trainer.train(_batch(0))
    checkpoint = _save(trainer, tmp_path / "ckpt", one)
    cfg = _config(toy_model_dir, tmp_path, 2)
    executor = build_executor(cfg)
    try:
        group = executor.trainer(trainer_spec(cfg))
        assert _load(group, checkpoint, cfg) == group.version == 1
        resaved_checkpoint = _save(group, tmp_path / "resaved", cfg)  # loaded into shards and saved again: a copy
        group.train(_batch(1))
        weights = _weights(group.host_weights())
    finally:
        executor.close()
    resaved = _trainer(one)
    assert _load(resaved, resaved_checkpoint, one) == 1
    expected = _state(trainer)
    for name, tensor in _state(resaved).items():
        assert torch.equal(tensor, expected[name]), name
    _assert_trained_alike(weights, uninterrupted, toy_model_dir)


# --- run-level checkpoints (heron.checkpoint) on the Ray backend -------------------------------

def _run_config(toy_model_dir, toy_data_path, run_dir, world_size, num_rollouts, *extra):
    cluster = ["cluster.backend=ray", "cluster.cpus_per_bundle=0.5", "colocate=false", RAY_START] if world_size > 1 else []
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={run_dir}",
        f"rollout.num_rollouts={num_rollouts}", "rollout.batch_size=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=4", "train.micro_batch_size=2", "train.lr=1e-3", f"train.world_size={world_size}",
        "train.weight_decay=0.1",  # the untrained toy earns no reward: decay makes every step move the weights
        "checkpoint.interval=1", "tracking.progress=false", "tracking.summary=false", *cluster, *extra,
    ])


def _train_and_weights(cfg) -> tuple[dict, int]:
    with RLRun(cfg) as run:
        run_rollouts(run)
        return _weights(run.c.trainer.host_weights()), run.start_rollout


def _assert_trained(weights, toy_model_dir) -> None:
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


def test_async_hf_export_checkpoint_of_two_ranks(ray_session, toy_model_dir, toy_data_path, tmp_path):
    """Ranks stage their shards and write them in the background; rank 0 writes hf/ from its
    full snapshot; the driver commits. The checkpoint resumes in one process bit-identically,
    and hf/ loads with from_pretrained to the trainer's weights."""
    from transformers import AutoModelForCausalLM

    extra = ["checkpoint.async=true", "checkpoint.hf_export=true"]
    saved, _ = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 2, 2, *extra))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "rollout-000001" / "hf")
    for name, tensor in hf.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    resumed, start = _train_and_weights(_run_config(toy_model_dir, toy_data_path, tmp_path, 1, 2, *extra))
    assert start == 2
    for name, tensor in saved.items():
        assert torch.equal(resumed[name], tensor), name
