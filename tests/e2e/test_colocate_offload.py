"""Colocated, offloaded runs on the toy task, against the same runs without offload.

- The prior-art regression: ``heron.loop.train`` with colocate + offload and a checkpoint
  saved every rollout (sync and async) completes; each save started with the trainer asleep,
  and each checkpoint holds the awake weights, equal to the same run without offload.
- A full ``heron.loop.train`` run with colocate + offload gives bit-identical parameters and
  metrics to the same run without offload.

The random toy model never answers an addition right, so a length-based reward stands in for
exact match: it varies within groups and the weights really move.
"""

from __future__ import annotations

import copy

import pytest
import torch

import heron.rl_run
from heron.config.root import load_config
from heron.loop import train
from heron.residency import State
from heron.reward.scorer import RewardScorer
from heron.trainer.policy_trainer import PolicyTrainer
from heron.toy.demo_assets import create_demo_assets
from tests.run_compare import assert_roundoff_mismatch, comparable


def length_reward(prompt, response: str) -> float:
    return float(len(response) % 3) / 2


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return create_demo_assets(tmp_path_factory.mktemp("assets"))


def _config(assets, run_dir, colocate: bool, *overrides: str):
    return load_config(None, [
        f"model.path={assets['model']}", f"data.path={assets['train']}", f"eval.path={assets['test']}",
        f"run.dir={run_dir}", f"colocate={str(colocate).lower()}", "rollout.num_rollouts=3",
        "rollout.batch_size=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=6",
        "train.micro_batch_size=8", "train.steps_per_rollout=2", "train.lr=0.003", "algo.kl_coef=0.05",
        "eval.interval=2", "eval.max_prompts=8", "eval.max_new_tokens=4",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *overrides,
    ])


def _saved_models(folder, like: torch.nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """checkpoint name -> its model tensors, loaded through heron.checkpoint's reader."""
    from heron.checkpoint.reader import load_into, open_checkpoint

    saved = {}
    for path in sorted(p for p in folder.iterdir() if p.name.startswith("rollout-")):
        model = copy.deepcopy(like)
        load_into(open_checkpoint(path), model, None)
        saved[path.name] = {k: v.clone() for k, v in model.state_dict().items()}
    return saved


def _train_recording_save_states(cfg):
    """``heron.loop.train``; records the trainer's residency state each time a checkpoint save starts."""
    states = []
    original = PolicyTrainer.save_state

    def save_state(self, *args, **kwargs):
        states.append(self.residency_state)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PolicyTrainer, "save_state", save_state)
        records, components = _train_capturing_components(cfg, mp)
    return states, components


@pytest.mark.parametrize("save_mode", ["checkpoint.async=true", "checkpoint.async=false"])
def test_checkpoint_every_rollout_while_asleep_holds_the_awake_weights(assets, tmp_path, save_mode):
    """The prior-art crash: the save found the trainer asleep. Here each save wakes it."""
    every_rollout = [save_mode, "checkpoint.interval=1", "checkpoint.keep_last=0"]
    states_a, run_a = _train_recording_save_states(_config(assets, tmp_path / "a", True, *every_rollout))
    states_b, run_b = _train_recording_save_states(_config(assets, tmp_path / "b", False, *every_rollout))
    assert states_a == [State.ASLEEP] * 3 and states_b == [State.AWAKE] * 3
    like = run_b.trainer.model
    saved_a, saved_b = _saved_models(tmp_path / "a" / "checkpoints", like), _saved_models(tmp_path / "b" / "checkpoints", like)
    assert list(saved_a) == list(saved_b) == ["rollout-000000", "rollout-000001", "rollout-000002"]
    for name in saved_a:
        for key, tensor in saved_b[name].items():
            assert torch.equal(saved_a[name][key], tensor), (name, key)
    run_a.trainer.wake()  # the last checkpoint holds exactly the live weights
    live = run_a.trainer.model.state_dict()
    assert any(not torch.equal(live[k], saved_a["rollout-000000"][k]) for k in live)  # training moved them
    for key, tensor in saved_a["rollout-000002"].items():
        assert torch.equal(tensor, live[key]), key


def assert_sleep_memory(records: list[dict], names) -> None:
    """``memory/<name>_{allocated,reserved}_{before,after}_sleep_bytes`` in every record: the
    sleep gave memory back. On CPU the figures are the backend's counts of the component's own
    state, so before = what it released and after = 0; on CUDA they are the process's allocator
    figures (both components in one process), so only after < before holds per component."""
    for record in records:
        for name in names:
            figures = {f"{k}_{p}": record[f"memory/{name}_{k}_{p}_sleep_bytes"] for k in ("allocated", "reserved") for p in ("before", "after")}
            assert figures["allocated_after"] < figures["allocated_before"], (name, figures)
            assert figures["reserved_after"] <= figures["reserved_before"], (name, figures)
            if not torch.cuda.is_available():
                assert figures["allocated_before"] == record[f"memory/{name}_released_bytes"] > 0, (name, figures)
                assert figures["allocated_after"] == figures["reserved_after"] == 0, (name, figures)


def _train_capturing_components(cfg, monkeypatch):
    captured = {}
    build = heron.rl_run.build_components

    def spy(config, *args):
        components = captured["c"] = build(config, *args)
        components.scorer = RewardScorer(length_reward)
        return components

    monkeypatch.setattr(heron.rl_run, "build_components", spy)
    return train(cfg), captured["c"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_full_run_with_colocate_and_offload_is_bit_identical(assets, tmp_path, monkeypatch):
    records_a, components_a = _train_capturing_components(_config(assets, tmp_path / "a", colocate=True), monkeypatch)
    records_b, components_b = _train_capturing_components(_config(assets, tmp_path / "b", colocate=False), monkeypatch)
    assert [comparable(r) for r in records_a] == [comparable(r) for r in records_b]
    # both engines sample from the trainer's weights: their logprobs agree up to round-off (as in test_trainer)
    assert_roundoff_mismatch(records_a, components_a.cfg)
    assert_roundoff_mismatch(records_b, components_b.cfg)
    assert any(r["train/grad_norm"] > 0 for r in records_a) and "eval/accuracy" in records_a[-1]
    # offload really happened: memory was released every rollout and is 0 at rest
    assert all(r["memory/trainer_released_bytes"] > 0 and r["memory/trainer_device_bytes"] == 0 for r in records_a)
    assert all(r["memory/engine_device_bytes"] > 0 and r["memory/trainer_released_bytes"] == 0 for r in records_b)
    assert_sleep_memory(records_a, ("trainer", "engine"))
    assert not any(k.endswith("_before_sleep_bytes") for k in records_b[-1])  # no sleep, no figures
    components_a.trainer.wake()
    params_b = components_b.trainer.model.state_dict()
    for name, tensor in components_a.trainer.model.state_dict().items():
        assert torch.equal(tensor, params_b[name]), name
    components_a.engine.wake()
    for name, tensor in components_a.engine.model.state_dict().items():
        assert torch.equal(tensor, params_b[name]), name
