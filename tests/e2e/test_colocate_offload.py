"""Colocated, offloaded runs on the toy task, against the same runs without offload.

- The prior-art regression: a checkpoint saved every rollout while the trainer is asleep
  (colocate + offload) completes and holds the awake weights, equal to a run without offload.
- A full ``heron.loop.train`` run with colocate + offload gives bit-identical parameters and
  metrics to the same run without offload.

The random toy model never answers an addition right, so a length-based reward stands in for
exact match: it varies within groups and the weights really move.
"""

from __future__ import annotations

import pytest
import torch

import heron.rl_run
from heron.config.root import load_config
from heron.loop import train
from heron.residency import State
from heron.reward.scorer import RewardScorer
from heron.rl_run import RLRun
from heron.toy.demo_assets import create_demo_assets


def length_reward(prompt, response: str) -> float:
    return float(len(response) % 3) / 2


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return create_demo_assets(tmp_path_factory.mktemp("assets"))


def _config(assets, run_dir, colocate: bool):
    return load_config(None, [
        f"model.path={assets['model']}", f"data.path={assets['train']}", f"eval.path={assets['test']}",
        f"run.dir={run_dir}", f"colocate={str(colocate).lower()}", "rollout.num_rollouts=3",
        "rollout.batch_size=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=6",
        "train.micro_batch_size=8", "train.steps_per_rollout=2", "train.lr=0.003", "algo.kl_coef=0.05",
        "eval.interval=2", "eval.max_prompts=8", "eval.max_new_tokens=4",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false",
    ])


def _saved_model(path, like: torch.nn.Module) -> dict[str, torch.Tensor]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = {"model": {k: torch.zeros_like(v) for k, v in get_model_state_dict(like).items()}}
    dcp.load(state, checkpoint_id=str(path))
    return state["model"]


def _run_saving_every_rollout(cfg, ckpt_dir) -> RLRun:
    """The loop's verbs, plus the trainer's save after every rollout (its old call site)."""
    with RLRun(cfg) as run:
        run.c.scorer = RewardScorer(length_reward)
        for rollout_id in run.rollout_ids():
            batch = run.advantages(run.reward(run.generate(rollout_id)))
            run.train(batch)
            run.push_weights()
            if cfg.colocate:
                assert run.c.trainer.residency_state is State.ASLEEP  # the prior-art crash site
            run.c.trainer.save(ckpt_dir / f"rollout-{rollout_id}")
    return run


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_checkpoint_every_rollout_while_asleep_holds_the_awake_weights(assets, tmp_path):
    offloaded = _run_saving_every_rollout(_config(assets, tmp_path / "a", colocate=True), tmp_path / "ckpt-a")
    resident = _run_saving_every_rollout(_config(assets, tmp_path / "b", colocate=False), tmp_path / "ckpt-b")
    like = resident.c.trainer.model
    for rollout_id in range(3):
        saved_a = _saved_model(tmp_path / "ckpt-a" / f"rollout-{rollout_id}", like)
        saved_b = _saved_model(tmp_path / "ckpt-b" / f"rollout-{rollout_id}", like)
        for name in saved_b:
            assert torch.equal(saved_a[name], saved_b[name]), (rollout_id, name)
    offloaded.c.trainer.wake()  # the last checkpoint holds exactly the live weights
    live = {k: v for k, v in offloaded.c.trainer.model.state_dict().items()}
    first = _saved_model(tmp_path / "ckpt-a" / "rollout-0", like)
    assert any(not torch.equal(live[k], first[k]) for k in live)  # training moved the weights
    for name, tensor in _saved_model(tmp_path / "ckpt-a" / "rollout-2", like).items():
        assert torch.equal(tensor, live[name]), name


def _train_capturing_components(cfg, monkeypatch):
    captured = {}
    build = heron.rl_run.build_components

    def spy(config):
        components = captured["c"] = build(config)
        components.scorer = RewardScorer(length_reward)
        return components

    monkeypatch.setattr(heron.rl_run, "build_components", spy)
    return train(cfg), captured["c"]


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(("time/", "memory/"))}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_full_run_with_colocate_and_offload_is_bit_identical(assets, tmp_path, monkeypatch):
    records_a, components_a = _train_capturing_components(_config(assets, tmp_path / "a", colocate=True), monkeypatch)
    records_b, components_b = _train_capturing_components(_config(assets, tmp_path / "b", colocate=False), monkeypatch)
    assert [_comparable(r) for r in records_a] == [_comparable(r) for r in records_b]
    assert any(r["train/grad_norm"] > 0 for r in records_a) and "eval/accuracy" in records_a[-1]
    # offload really happened: memory was released every rollout and is 0 at rest
    assert all(r["memory/trainer_released_bytes"] > 0 and r["memory/trainer_device_bytes"] == 0 for r in records_a)
    assert all(r["memory/engine_device_bytes"] > 0 and r["memory/trainer_released_bytes"] == 0 for r in records_b)
    components_a.trainer.wake()
    params_b = components_b.trainer.model.state_dict()
    for name, tensor in components_a.trainer.model.state_dict().items():
        assert torch.equal(tensor, params_b[name]), name
    components_a.engine.wake()
    for name, tensor in components_a.engine.model.state_dict().items():
        assert torch.equal(tensor, params_b[name]), name
