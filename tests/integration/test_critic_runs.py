"""PPO with a learned critic (``algo.advantage=gae``) in real runs of the toy model, under a reward
the random model varies on (so values, value loss and both updates are non-zero):

- colocated with offload (trainer, critic and engine take turns on the device, each resting
  asleep) gives bit-identical metrics, policy and critic parameters and AdamW states to a run
  without offload;
- a run stopped after a checkpoint and resumed equals the straight run bit for bit, the critic's
  parameters and AdamW moments included (its state lives in the checkpoint's ``critic/`` folder);
- so does a compiled run (``train.compile``: the critic's backbone layers compiled), colocated
  with offload (slow tier);
- a checkpoint without a critic does not resume into a critic run, in one line;
- on the Ray backend the critic runs in its own actor next to trainer rank 0, colocated with
  offload, saves its part of the checkpoint, and a run stopped and resumed on a new Ray
  session equals the straight Ray run; with ``train.compile`` the actors compile their layers
  as they build, or refuse in one line without inductor's toolchain (slow tier).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from heron.checkpoint.dcp_io import live_state
from heron.checkpoint.errors import CheckpointError
from heron.config.root import load_config
from heron.loop import run_rollouts
from heron.reward.builtin import BUILTIN_REWARDS
from heron.rl_run import RLRun
from heron.tracking.metrics_file import read_jsonl
from tests.run_compare import comparable
from tests.tolerance import RAY_START
from tests.toy_run import toy_run_overrides

NUM_ROLLOUTS, STOP_AFTER = 3, 0  # checkpoints after every rollout; the stopped run ends after rollout 0


def _length_reward(prompt, response: str) -> float:
    """Varies on the random toy model, so the critic has something to fit."""
    return len(response.strip()) / 8.0


@pytest.fixture(scope="module", autouse=True)
def length_reward():
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BUILTIN_REWARDS, "test_length", _length_reward)
        yield


def _config(toy_model_dir, toy_data_path, run_dir: Path, *extra: str):
    return load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, run_dir, "algo.advantage=gae", "reward.fn=test_length", "critic.lr=1e-2",
        "algo.lam=0.95", "train.steps_per_rollout=2", "train.micro_batch_size=1", f"rollout.num_rollouts={NUM_ROLLOUTS}",
        "checkpoint.interval=1", "critic.warmup_steps=2", "critic.lr_schedule=cosine", *extra,
    ))


class _Stop(Exception):
    pass


def _run(cfg, stop_after: int | None = None) -> dict:
    """Runs the loop; returns the final tensors of policy and critic (params and AdamW state), awake."""
    with RLRun(cfg) as run:
        def observer(batch, record):
            if batch.rollout_id == stop_after:
                raise _Stop
        try:
            run_rollouts(run, observer)
        except _Stop:
            return {}
        return {"policy": _tensors(run.c.trainer), "critic": _tensors(run.c.critic)}


def _tensors(component) -> dict[str, torch.Tensor]:
    """Copies, awake: an offloaded component rests asleep (colocated, waking one sleeps the other)."""
    component.wake()
    state = live_state(component.model, component.optimizer)
    out = {f"model/{k}": v.clone() for k, v in state["model"].items()}
    for fqn, per_param in state["optimizer"]["state"].items():
        out.update({f"adam/{fqn}/{k}": v.clone() for k, v in per_param.items() if torch.is_tensor(v)})
    return out


def _assert_same(a: dict, b: dict) -> None:
    for part in ("policy", "critic"):
        assert a[part].keys() == b[part].keys()
        different = [k for k in a[part] if not torch.equal(a[part][k], b[part][k])]
        assert different == [], (part, different[:3])


def _rows(run_dir: Path) -> list[dict]:
    return [comparable(row) for row in read_jsonl(run_dir / "metrics.jsonl")]


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    """Equal records (nan == nan: explained variance is nan when the returns do not vary)."""
    return [{k: str(v) for k, v in r.items()} for r in a] == [{k: str(v) for k, v in r.items()} for r in b]


@pytest.fixture(scope="module")
def straight(toy_model_dir, toy_data_path, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("critic_straight")
    return {"dir": run_dir, "state": _run(_config(toy_model_dir, toy_data_path, run_dir))}


def test_the_critic_trains_on_varying_rewards(straight):
    rows = _rows(straight["dir"])
    assert len({r["reward/mean"] for r in rows}) > 1
    assert all(r["critic/value_loss"] > 0 and r["critic/grad_norm"] > 0 for r in rows)
    assert rows[0]["critic/value_mean"] == 0.0 and rows[-1]["critic/value_mean"] != 0.0  # the head starts at 0
    head = straight["state"]["critic"]["model/value_head.weight"]
    assert bool(head.abs().sum() > 0)
    checkpoint = straight["dir"] / "checkpoints" / f"rollout-{NUM_ROLLOUTS - 1:06d}"
    assert (checkpoint / "critic" / "state.json").is_file() and any((checkpoint / "critic" / "dcp").iterdir())


def test_colocate_offload_is_bit_identical_to_no_offload(toy_model_dir, toy_data_path, tmp_path, straight):
    state = _run(_config(toy_model_dir, toy_data_path, tmp_path, "colocate=true"))
    assert _same_rows(_rows(tmp_path), _rows(straight["dir"]))
    assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["memory/critic_released_bytes"] > 0  # the critic really slept
    _assert_same(state, straight["state"])


def test_stop_and_resume_equals_straight_run(toy_model_dir, toy_data_path, tmp_path, straight):
    cfg = _config(toy_model_dir, toy_data_path, tmp_path, "checkpoint.async=true")
    _run(cfg, stop_after=STOP_AFTER)
    assert [r["rollout_id"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0]
    state = _run(cfg)
    assert _same_rows(_rows(tmp_path), _rows(straight["dir"]))
    _assert_same(state, straight["state"])


@pytest.mark.slow  # compiles the layers' graphs (~1-2 min on 2 cores)
def test_compiled_colocated_critic_run_resumes_exactly(toy_model_dir, toy_data_path, tmp_path):
    """train.compile with the critic, colocated with offload: the critic's compiled backbone layers
    sleep and wake with its weights, and a stopped run, its graphs compiled again (dynamo reset, as
    in a new process), resumes to the straight compiled run's metrics and both states bit for bit."""
    mode = ("train.compile=true", "colocate=true", "checkpoint.async=true")
    torch._dynamo.reset()
    straight_state = _run(_config(toy_model_dir, toy_data_path, tmp_path / "straight", *mode))
    cfg = _config(toy_model_dir, toy_data_path, tmp_path / "run", *mode)
    torch._dynamo.reset()
    _run(cfg, stop_after=STOP_AFTER)
    torch._dynamo.reset()
    with RLRun(cfg) as run:
        run_rollouts(run)
        compiled = [m for m in run.c.critic.model.backbone.modules() if getattr(m, "_compiled_call_impl", None) is not None]
        assert len(compiled) == run.c.critic.model.backbone.config.num_hidden_layers
        state = {"policy": _tensors(run.c.trainer), "critic": _tensors(run.c.critic)}
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["memory/critic_released_bytes"] > 0  # it slept
    assert _same_rows(_rows(tmp_path / "run"), _rows(tmp_path / "straight"))
    _assert_same(state, straight_state)
    torch._dynamo.reset()


def test_packed_micro_batches_train_policy_and_critic(toy_model_dir, toy_data_path, tmp_path, straight):
    """train.max_tokens_per_micro_batch with the critic: token-level advantages, returns and old
    values are cut with their rows (this crashed the policy loss with a shape mismatch before).
    Rollout 0 is generated by the same initial policy, so its rewards equal the straight run's."""
    _run(_config(toy_model_dir, toy_data_path, tmp_path, "train.max_tokens_per_micro_batch=24", "rollout.num_rollouts=2"))
    rows, reference = read_jsonl(tmp_path / "metrics.jsonl"), read_jsonl(straight["dir"] / "metrics.jsonl")
    assert [r["rollout_id"] for r in rows] == [0, 1]
    assert rows[0]["reward/mean"] == reference[0]["reward/mean"]
    assert all(r["critic/value_loss"] > 0 and r["train/grad_norm"] > 0 for r in rows)


def test_a_checkpoint_without_a_critic_does_not_resume_into_a_critic_run(toy_model_dir, toy_data_path, tmp_path, straight):
    import shutil

    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(straight["dir"] / "checkpoints" / "rollout-000000", checkpoints / "rollout-000000")
    shutil.rmtree(checkpoints / "rollout-000000" / "critic")  # as saved by a run without a critic
    from heron.checkpoint.manifest import write_manifest

    write_manifest(checkpoints / "rollout-000000", 0)
    with pytest.raises(CheckpointError, match="has no critic state") as error:
        RLRun(_config(toy_model_dir, toy_data_path, tmp_path))
    assert "\n" not in str(error.value)


def test_a_checkpoint_without_the_critic_lr_state_does_not_resume_a_scheduled_critic(toy_model_dir, toy_data_path,
                                                                                     tmp_path, straight):
    """A critic/state.json saved before the critic had an LR schedule: a run whose critic LR
    depends on its step says so in one line instead of restarting the schedule."""
    import json
    import shutil

    from heron.checkpoint.manifest import write_manifest

    checkpoint = tmp_path / "checkpoints" / "rollout-000000"
    shutil.copytree(straight["dir"] / "checkpoints" / "rollout-000000", checkpoint)
    state_file = checkpoint / "critic" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["scheduler"]["last_epoch"] == 2  # two applied steps (train.steps_per_rollout=2)
    state_file.write_text(json.dumps({"fingerprint": state["fingerprint"]}))
    write_manifest(checkpoint, 0)
    with pytest.raises(CheckpointError, match="has no critic LR schedule state") as error:
        RLRun(_config(toy_model_dir, toy_data_path, tmp_path))
    assert "\n" not in str(error.value)


def _ray_config(toy_model_dir, toy_data_path, run_dir: Path, *extra: str):
    return _config(toy_model_dir, toy_data_path, run_dir, "cluster.backend=ray", RAY_START, "cluster.num_cpus=2",
                   "cluster.cpus_per_bundle=1", "colocate=true", "checkpoint.async=true", *extra)


def _ray_run(cfg, stop_after: int | None = None) -> list[dict]:
    """Runs the loop on Ray (stopping after rollout ``stop_after``); the records of this run."""
    records = []
    with RLRun(cfg) as run:
        def observer(batch, record):
            records.append(record)
            if batch.rollout_id == stop_after:
                raise _Stop
        try:
            run_rollouts(run, observer)
        except _Stop:
            pass
    return records


@pytest.fixture(scope="module")
def ray_straight(toy_model_dir, toy_data_path, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("critic_ray_straight")
    return {"dir": run_dir, "records": _ray_run(_ray_config(toy_model_dir, toy_data_path, run_dir))}


def test_critic_runs_on_ray_colocated_with_offload(no_ray, ray_straight):
    records = ray_straight["records"]
    assert [r["policy_version"] for r in records] == [1, 2, 3]
    assert all(r["critic/value_loss"] > 0 for r in records) and records[-1]["critic/value_mean"] != 0.0
    assert records[-1]["memory/critic-rank-0_released_bytes"] > 0  # the critic rank actor slept between its operations
    assert (ray_straight["dir"] / "checkpoints" / "rollout-000001" / "critic" / "state.json").is_file()


@pytest.mark.slow  # 80 s; the default tier resumes a critic exactly in one process, and on Ray across world sizes (below)
def test_critic_run_on_ray_resumes_exactly(no_ray, toy_model_dir, toy_data_path, tmp_path, ray_straight):
    """Stopped after rollout 0 and resumed on a new Ray session: rollouts 1-2 (the critic's values,
    value loss and both updates) equal the straight Ray run's, so the critic actor's weights and
    AdamW state came back from the checkpoint's critic/ folder."""
    cfg = _ray_config(toy_model_dir, toy_data_path, tmp_path)
    assert [r["rollout_id"] for r in _ray_run(cfg, stop_after=STOP_AFTER)] == [0]
    assert [r["rollout_id"] for r in _ray_run(cfg)] == [1, 2]
    assert _same_rows(_rows(tmp_path), _rows(ray_straight["dir"]))


@pytest.mark.slow  # compiles the layers' graphs in the actors
def test_compiled_critic_run_on_ray(no_ray, toy_model_dir, toy_data_path, tmp_path, monkeypatch):
    """train.compile on Ray, colocated with offload: the trainer rank and the critic's actor compile
    their layers as they build (heron.trainer.build, heron.critic.build; the values are checked
    against eager in tests/unit/test_compile.py), inductor compiles inside the actors, and the run
    trains both through every rollout, each actor sleeping between its operations. An actor
    without inductor's toolchain (its C++ compiler named by CXX, which the actors inherit) refuses
    as it builds, in one line."""
    cfg = _ray_config(toy_model_dir, toy_data_path, tmp_path / "refused", "train.compile=true")
    with monkeypatch.context() as env:
        env.setenv("CXX", "heron-no-such-compiler")
        with pytest.raises(RuntimeError, match=r"train.compile=true: no C\+\+ compiler .*or set train.compile=false"):
            _ray_run(cfg)
    records = _ray_run(_ray_config(toy_model_dir, toy_data_path, tmp_path / "run", "train.compile=true"))
    assert [r["policy_version"] for r in records] == [1, 2, 3]
    assert all(math.isfinite(r["train/loss"]) and r["train/grad_norm"] > 0 and r["critic/value_loss"] > 0 for r in records)
    assert records[-1]["critic/value_mean"] != 0.0
    assert records[-1]["memory/critic-rank-0_released_bytes"] > 0


def test_a_bad_critic_path_fails_in_the_preflight(toy_model_dir, toy_data_path, tmp_path):
    """critic.path must be an HF folder with the policy's vocabulary: one line, before any model loads."""
    import json

    from heron.config.base import ConfigError
    from heron.preflight import preflight

    with pytest.raises(ConfigError, match="critic.path '.*' is not an HF model folder"):
        preflight(_config(toy_model_dir, toy_data_path, tmp_path / "run", f"critic.path={tmp_path}"))
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((toy_model_dir / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 1}))
    with pytest.raises(ConfigError, match="the critic reads the policy's token ids") as error:
        preflight(_config(toy_model_dir, toy_data_path, tmp_path / "run", f"critic.path={other}"))
    assert "\n" not in str(error.value)


def test_the_critic_is_data_parallel_over_the_trainer_ranks(no_ray, toy_model_dir, toy_data_path, tmp_path, ray_straight):
    """train.world_size=2: a critic rank on each trainer bundle, each training its share. Rollout 0
    samples from the same initial policy, so its critic step equals the one-rank run's within the
    round-off of another summation order (tests/tolerance.py, rule 2). Stopped there and resumed
    on one rank, DCP reshards both ranks' critic shards, and rollouts 1-2 give the one-rank run's
    values within round-off: the weights differ from its own by the round-off of rollout 0's
    update, so the samples are the same (rule 4) and the critic's values too."""
    from tests.tolerance import assert_sums_close, reduction_length

    reference = ray_straight["records"]
    n = reduction_length(_toy_config(toy_model_dir), tokens=64)
    first = _ray_run(_ray_config(toy_model_dir, toy_data_path, tmp_path, "train.world_size=2"), stop_after=STOP_AFTER)
    assert [r["rollout_id"] for r in first] == [0]
    assert first[0]["memory/critic-rank-1_released_bytes"] > 0  # the second critic rank exists and slept
    assert first[0]["reward/mean"] == reference[0]["reward/mean"] and first[0]["critic/value_mean"] == 0.0
    for key in ("critic/value_loss", "critic/grad_norm"):
        assert_sums_close(first[0][key], reference[0][key], n=n, magnitude=abs(reference[0][key]) + 1.0, what=key)

    resumed = _ray_run(_ray_config(toy_model_dir, toy_data_path, tmp_path, "train.world_size=1"))
    assert [r["rollout_id"] for r in resumed] == [1, 2]
    for got, expected in zip(resumed, reference[1:]):
        assert got["reward/mean"] == expected["reward/mean"]  # the same samples
        value_mean = expected["critic/value_mean"]
        assert_sums_close(got["critic/value_mean"], value_mean, n=n, magnitude=abs(value_mean) + 1.0, what="critic/value_mean")
    assert reference[1]["critic/value_mean"] != 0.0


def _toy_config(model_dir):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir)
