"""Resume on real toy RL runs: k rollouts, stop, resume, the rest == the run straight through
(bit-exact parameters, optimizer state and per-rollout metrics), for sync and async saves;
checkpoints that do not fit fail in one line before training and leave every file as it was;
damaged checkpoints are skipped; HF export loads with from_pretrained and gives the trainer's
logits; the ``heron ckpt`` commands."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import pytest
import torch

from heron.checkpoint.errors import CheckpointError, CheckpointMismatchError
from heron.checkpoint.resume import check_fits
from heron.checkpoint.reader import open_checkpoint
from heron.cli import main as heron_main
from heron.config.base import to_dict
from heron.config.root import load_config
from heron.errors import UserError
from heron.folder_lock import LOCK_FILE
from heron.loop import train
from heron.reward.builtin import BUILTIN_REWARDS
from heron.rl_run import RLRun
from heron.tracking.metrics_file import read_jsonl
from tests.run_compare import comparable
from tests.soak import trials

NUM_ROLLOUTS, STOP_AFTER = 5, 2  # checkpoints after rollouts 1, 3, 4 (interval 2 + the last)

# Variants of the exact-resume test; the colocated one resumes into a trainer that rests asleep
# (load_state wakes it and republishes the host snapshot of the weights).
BF16 = "train.precision=bf16"
EMULATED_OK = "run.allow_emulated_bf16=true"  # bf16 also on a CPU without it (slower, same code)
RESUME_MODES = [
    pytest.param(["checkpoint.async=false"], id="sync"),
    pytest.param(["checkpoint.async=true"], id="async"),
    pytest.param(["checkpoint.async=true", "colocate=true"], id="async-colocate-offload"),
    # mixed precision (issue 14, item 3): bf16 autocast over float32 master weights resumes exactly
    pytest.param(["checkpoint.async=false", BF16, EMULATED_OK], id="sync-bf16"),
]


def _length_reward(prompt, response: str) -> float:
    """A reward the random toy model varies on, so advantages (and updates) are non-zero."""
    return len(response.strip()) / 8.0


def _parity_reward(prompt, response: str) -> float:
    """Binary and varied on the random toy model, so some groups are all equal and some mixed."""
    return float(len(response.strip()) % 2)


class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def assets(toy_model_dir, tmp_path_factory):
    from heron.toy.addition import write_splits

    folder = tmp_path_factory.mktemp("ckpt_assets")
    paths = write_splits(folder, seed=0, max_digits=2, num_train=64, num_test=16)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BUILTIN_REWARDS, "test_length", _length_reward)
        mp.setitem(BUILTIN_REWARDS, "test_parity", _parity_reward)
        yield {"model": toy_model_dir, "train": paths["train"], "test": paths["test"]}


def _config(assets, run_dir: Path, *overrides: str):
    return load_config(None, _cli_overrides(assets, run_dir, *overrides))


def _run(cfg, monkeypatch=None, stop_after: int | None = None) -> RLRun:
    """Runs the loop; returns the RLRun (its trainer holds the final state). With ``stop_after``
    the run is interrupted right after that rollout's checkpoint step, as a crash would."""
    runs: list[RLRun] = []
    original_enter, original_checkpoint = RLRun.__enter__, RLRun.checkpoint

    def enter(self):
        runs.append(self)
        return original_enter(self)

    def checkpoint(self, rollout_id):
        original_checkpoint(self, rollout_id)
        if rollout_id == stop_after:
            raise _Stop

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RLRun, "__enter__", enter)
        mp.setattr(RLRun, "checkpoint", checkpoint)
        if stop_after is None:
            train(cfg)
        else:
            with pytest.raises(_Stop):
                train(cfg)
    return runs[0]


def _rows(path: Path) -> list[dict]:
    """Metric rows as bit-identical runs must agree on (tests/run_compare.py)."""
    return [comparable(row) for row in read_jsonl(path)]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file's sha256, except the lock a run takes on the folder (heron.lock: no data)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


@pytest.fixture(scope="module")
def straight(assets, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight")
    run = _run(_config(assets, run_dir, "checkpoint.hf_export=true"))
    return {"dir": run_dir, "run": run}


@pytest.fixture(scope="module")
def straight_bf16(assets, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight_bf16")
    return {"dir": run_dir, "run": _run(_config(assets, run_dir, BF16, EMULATED_OK))}


def _assert_same_trainer_state(a, b):
    from heron.checkpoint.dcp_io import live_state

    state_a = live_state(a.model, a.optimizer)
    state_b = live_state(b.model, b.optimizer)
    for name, tensor in state_a["model"].items():
        assert torch.equal(tensor, state_b["model"][name]), name
    for fqn, per_param in state_a["optimizer"]["state"].items():
        for key, value in per_param.items():
            assert torch.equal(value, state_b["optimizer"]["state"][fqn][key]), (fqn, key)
    assert state_a["optimizer"]["param_groups"] == state_b["optimizer"]["param_groups"]
    assert a.scheduler.state_dict() == b.scheduler.state_dict() and a.version == b.version


@pytest.mark.parametrize("mode", RESUME_MODES)
def test_stop_and_resume_equals_straight_run(assets, request, tmp_path, mode):
    straight = request.getfixturevalue("straight_bf16" if BF16 in mode else "straight")
    run_dir = tmp_path / "run"
    _run(_config(assets, run_dir, *mode), stop_after=STOP_AFTER)
    assert [r["rollout_id"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2]
    resumed = _run(_config(assets, run_dir, *mode))
    # rollout 2 ran after the last checkpoint (rollout 1): its row was dropped and redone
    assert resumed.start_rollout == 2
    assert _rows(run_dir / "metrics.jsonl") == _rows(straight["dir"] / "metrics.jsonl")
    assert read_jsonl(run_dir / "eval.jsonl") == read_jsonl(straight["dir"] / "eval.jsonl")
    resumed.c.trainer.wake()  # an offloaded trainer rests asleep; no-op otherwise
    _assert_same_trainer_state(resumed.c.trainer, straight["run"].c.trainer)
    assert resumed.c.sampler.state_dict() == straight["run"].c.sampler.state_dict()
    assert resumed.c.engine.policy_version == straight["run"].c.engine.policy_version == NUM_ROLLOUTS
    rewards = [row["reward/mean"] for row in _rows(run_dir / "metrics.jsonl")]
    assert len(set(rewards)) > 1  # the runs really trained on varying rewards


def test_finished_run_resumes_to_nothing_left(assets, straight, tmp_path):
    run_dir = tmp_path / "again"
    shutil.copytree(straight["dir"], run_dir)
    cfg = _config(assets, run_dir, f"checkpoint.dir={run_dir / 'checkpoints'}")
    run = _run(cfg)
    assert run.start_rollout == NUM_ROLLOUTS
    assert _rows(run_dir / "metrics.jsonl") == _rows(straight["dir"] / "metrics.jsonl")


def _copy_checkpoints(straight, tmp_path) -> Path:
    folder = tmp_path / "checkpoints"
    shutil.copytree(straight["dir"] / "checkpoints", folder)
    return folder


def test_model_of_another_shape_fails_in_one_line_before_training(assets, straight, tmp_path):
    from heron.toy.addition import make_prompts
    from heron.toy.model import ToyModelSpec, create_toy_model

    corpus = [p.text + p.label for p in make_prompts(500, seed=0, max_digits=2)]
    small = create_toy_model(tmp_path / "small", corpus, ToyModelSpec(hidden_size=64, intermediate_size=128))
    folder = _copy_checkpoints(straight, tmp_path)
    before = _snapshot(folder)
    cfg = _config({**assets, "model": small}, tmp_path / "run", f"checkpoint.dir={folder}")
    with pytest.raises(CheckpointMismatchError) as info:
        RLRun(cfg)
    message = str(info.value)
    assert "\n" not in message and message.startswith("checkpoint rollout-000004 does not fit this run's model:")
    assert "in the checkpoint" in message and "in the model" in message
    assert _snapshot(folder) == before and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_other_optimizer_structure_fails_in_one_line(assets, straight):
    ckpt = open_checkpoint(straight["dir"] / "checkpoints" / "rollout-000004")
    model = straight["run"].c.trainer.model
    params = list(model.parameters())
    split = torch.optim.AdamW([{"params": params[:10]}, {"params": params[10:]}])
    with pytest.raises(CheckpointMismatchError, match=r"optimizer: param groups of \[\d+\] parameters in the checkpoint, \[10, \d+\] in the run"):
        check_fits(ckpt, model, split, to_dict(straight["run"].cfg))
    sgd = torch.optim.SGD(params, lr=0.1)
    with pytest.raises(CheckpointMismatchError, match="has a AdamW optimizer, the run a SGD"):
        check_fits(ckpt, model, sgd, to_dict(straight["run"].cfg))


def test_changed_config_fails_in_one_line(assets, straight, tmp_path):
    folder = _copy_checkpoints(straight, tmp_path)
    before = _snapshot(folder)
    cfg = _config(assets, tmp_path / "run", f"checkpoint.dir={folder}", "train.lr=0.001")
    with pytest.raises(CheckpointMismatchError, match=r"config: train.lr=0.003 in the checkpoint, 0.001 in this run;"):
        RLRun(cfg)
    assert _snapshot(folder) == before


def test_damaged_newest_falls_back_to_older_and_touches_nothing(assets, straight, tmp_path, caplog):
    folder = _copy_checkpoints(straight, tmp_path)
    shard = folder / "rollout-000004" / "dcp" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x01
    shard.write_bytes(bytes(data))
    (folder / "rollout-000003" / "manifest.json").unlink()  # incomplete
    before = _snapshot(folder)
    cfg = _config(assets, tmp_path / "run", f"checkpoint.dir={folder}")
    with caplog.at_level(logging.WARNING, logger="heron.checkpoint"):
        run = RLRun(cfg)
    run.__exit__(None, None, None)
    assert run.start_rollout == 2  # rollout-000001
    skipped = " ".join(r.getMessage() for r in caplog.records)
    assert "rollout-000004" in skipped and "checksum mismatch" in skipped
    assert "rollout-000003" in skipped and "no manifest.json" in skipped
    assert _snapshot(folder) == before
    explicit = _config(assets, tmp_path / "run2", f"checkpoint.load={folder / 'rollout-000004'}")
    with pytest.raises(CheckpointError, match="rollout-000004 is corrupt: checksum mismatch in dcp/__0_0.distcp$"):
        RLRun(explicit)


def test_fresh_run_refuses_a_run_dir_with_metrics_of_another_run(assets, straight, tmp_path):
    run_dir = tmp_path / "used"
    run_dir.mkdir()
    shutil.copy(straight["dir"] / "metrics.jsonl", run_dir / "metrics.jsonl")
    shutil.copy(straight["dir"] / "config.yaml", run_dir / "config.yaml")
    before = (run_dir / "metrics.jsonl").read_bytes()
    with pytest.raises(UserError, match="already holds metrics.jsonl of another run"):
        RLRun(_config(assets, run_dir, "train.lr=0.001"))
    assert (run_dir / "metrics.jsonl").read_bytes() == before
    # the same run that crashed before its first checkpoint restarts from scratch; its logs are kept aside
    run = RLRun(_config(assets, run_dir))
    run.__exit__(None, None, None)
    assert run.start_rollout == 0 and read_jsonl(run_dir / "metrics.jsonl") == []
    assert [p.read_bytes() for p in run_dir.glob("metrics.jsonl.old-*")] == [before]


def test_rerun_after_a_crash_before_the_first_checkpoint_moves_earlier_logs_aside(assets, straight, tmp_path, caplog):
    """The first attempt crashed after the eval before rollout 0, before any checkpoint (and
    before any metrics row): the rerun starts fresh with the earlier logs renamed, not appended to."""
    run_dir = tmp_path / "run"

    def crash(self, batch):
        raise _Stop

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RLRun, "train", crash)
        with pytest.raises(_Stop):
            train(_config(assets, run_dir))
    earlier = (run_dir / "eval.jsonl").read_bytes()
    assert [row["rollout_id"] for row in read_jsonl(run_dir / "eval.jsonl")] == [-1]
    with caplog.at_level(logging.WARNING):
        _run(_config(assets, run_dir))
    assert read_jsonl(run_dir / "eval.jsonl") == read_jsonl(straight["dir"] / "eval.jsonl")  # [-1, 1, 3, 4]
    aside = list(run_dir.glob("eval.jsonl.old-*"))
    assert [p.read_bytes() for p in aside] == [earlier]
    assert any(aside[0].name in r.getMessage() for r in caplog.records)


def _logits(model, tokens: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(tokens).logits


def test_hf_export_loads_and_gives_the_trainers_logits(straight, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = straight["dir"] / "checkpoints" / "rollout-000004"
    assert heron_main(["ckpt", "export-hf", str(ckpt), str(tmp_path / "exported")]) == 0
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18]])
    trainer_model = straight["run"].c.trainer.model
    expected = _logits(trainer_model, tokens)
    trainer_model.train()
    for folder in (ckpt / "hf", tmp_path / "exported"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        torch.testing.assert_close(_logits(model, tokens), expected, rtol=0, atol=0)
        assert AutoTokenizer.from_pretrained(folder).eos_token_id == model.generation_config.eos_token_id
    assert heron_main(["ckpt", "export-hf", str(ckpt), str(tmp_path / "exported")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_ckpt_cli_list_and_inspect(straight, tmp_path, capsys):
    folder = _copy_checkpoints(straight, tmp_path)
    (folder / "rollout-000003" / "state.json").write_text("{}")
    assert heron_main(["ckpt", "list", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rollout-000004  rollout 4 ") and lines[0].endswith("ok (latest)")
    assert lines[1].startswith("rollout-000003  INVALID:") and "state.json" in lines[1]
    assert [line.split()[0] for line in lines] == ["rollout-000004", "rollout-000003", "rollout-000001"]
    assert heron_main(["ckpt", "inspect", str(folder / "rollout-000004")]) == 0
    out = capsys.readouterr().out
    assert "rollout_id: 4" in out and "policy_version: 5" in out and "train.lr = 0.003" in out
    assert heron_main(["ckpt", "inspect", str(folder / "rollout-000003")]) == 2
    assert heron_main(["ckpt", "list", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


KILL_OVERRIDES = ["checkpoint.interval=1", "checkpoint.async=true", "checkpoint.hf_export=true", "eval.interval=2"]


@pytest.fixture(scope="module")
def straight_for_kills(assets, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight-kills")
    return {"dir": run_dir, "run": _run(_config(assets, run_dir, *KILL_OVERRIDES))}


def _train_and_kill(assets, run_dir: Path, delay_s: float) -> bool:
    """Starts a real training process, SIGKILLs it ``delay_s`` after its first metrics row;
    returns whether the kill left an unfinished save behind. The child uses this process's
    thread count, so both do the same float operations in the same order (bit-exact resume)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from heron.checkpoint.layout import leftovers

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": str(torch.get_num_threads())}
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_train_child.py")),
                              *_cli_overrides(assets, run_dir, *KILL_OVERRIDES)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (run_dir / "metrics.jsonl").exists() and child.poll() is None:
            time.sleep(0.02)  # polls for an event (the first row); the pytest timeout catches a hang
        time.sleep(delay_s)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    folder = run_dir / "checkpoints"
    return folder.is_dir() and bool(leftovers(folder))


@pytest.mark.slow
def test_sigkilled_training_resumes_exactly_with_load_auto(assets, straight_for_kills, tmp_path):
    """A real training process (checkpoint every rollout, async) is SIGKILLed at a random
    moment; ``checkpoint.load=auto`` in a new run finishes it, and metrics, evals and trainer
    state equal those of the run straight through, bit for bit. 4 trials in the slow tier, 50
    in `make soak`."""
    import random

    num_trials = trials("kill_resume", slow=4, soak=50)
    straight = straight_for_kills
    inside_save = 0
    for trial in range(num_trials):
        run_dir = tmp_path / f"killed-{trial}"
        inside_save += _train_and_kill(assets, run_dir, random.Random(trial).uniform(0.0, 0.8))
        resumed = _run(_config(assets, run_dir, *KILL_OVERRIDES))
        print(f"trial {trial}: resumed at rollout {resumed.start_rollout}")
        assert 0 <= resumed.start_rollout <= NUM_ROLLOUTS
        assert _rows(run_dir / "metrics.jsonl") == _rows(straight["dir"] / "metrics.jsonl"), trial
        assert read_jsonl(run_dir / "eval.jsonl") == read_jsonl(straight["dir"] / "eval.jsonl"), trial
        _assert_same_trainer_state(resumed.c.trainer, straight["run"].c.trainer)
        shutil.rmtree(run_dir)
    print(f"{inside_save}/{num_trials} kills landed inside an unfinished save")


def _cli_overrides(assets, run_dir: Path, *overrides: str) -> list[str]:
    """The overrides ``_config`` applies, as a list (for a child process)."""
    return [
        f"model.path={assets['model']}", f"data.path={assets['train']}", f"eval.path={assets['test']}",
        f"run.dir={run_dir}", "reward.fn=test_length", f"rollout.num_rollouts={NUM_ROLLOUTS}",
        "rollout.batch_size=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=4",
        "train.lr=0.003", "train.steps_per_rollout=2", "train.micro_batch_size=4", "train.weight_decay=0.01",
        "eval.interval=2", "eval.max_prompts=4", "eval.max_new_tokens=4",
        "checkpoint.interval=2", "checkpoint.keep_last=0",
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false", *overrides,
    ]


def test_explicit_older_checkpoint_sets_newer_ones_aside(assets, straight, tmp_path):
    run_dir = tmp_path / "run"
    folder = run_dir / "checkpoints"
    shutil.copytree(straight["dir"] / "checkpoints", folder)
    run = RLRun(_config(assets, run_dir, f"checkpoint.load={folder / 'rollout-000001'}"))
    run.__exit__(None, None, None)
    assert run.start_rollout == 2
    assert [p.name for p in sorted(folder.iterdir()) if p.name.startswith("rollout-000001")] == ["rollout-000001"]
    names = sorted(p.name for p in folder.iterdir())
    assert any(n.startswith("rollout-000003.abandoned-") for n in names)
    assert any(n.startswith("rollout-000004.abandoned-") for n in names)
    assert "rollout-000004" not in names  # a later checkpoint.load=auto cannot jump to the old timeline


def test_resume_drops_a_torn_last_line_of_the_run_files_with_a_warning(assets, straight, tmp_path, caplog):
    """What a crash on a full disk left: the last record written only in part."""
    run_dir = tmp_path / "run"
    shutil.copytree(straight["dir"], run_dir)
    for name in ("metrics.jsonl", "eval.jsonl"):
        with open(run_dir / name, "a") as f:
            f.write('{"rollout_id": 5, "reward/me')
    with caplog.at_level(logging.WARNING):
        run = RLRun(_config(assets, run_dir, "checkpoint.hf_export=true"))
    run.__exit__(None, None, None)
    assert run.start_rollout == NUM_ROLLOUTS
    for name in ("metrics.jsonl", "eval.jsonl"):
        assert (run_dir / name).read_bytes() == (straight["dir"] / name).read_bytes()
        assert any(f"{name}:" in r.getMessage() and "torn" in r.getMessage() for r in caplog.records)


# DAPO's dynamic sampling draws extra prompts and generates extra rounds inside a rollout; with
# them the KL-in-reward term, RLOO, TIS and the sequence-mean aggregation: resume stays exact.
DAPO_LIKE = [
    "reward.fn=test_parity", "rollout.samples_per_prompt=2", "rollout.dynamic_sampling.enabled=true",
    "rollout.dynamic_sampling.max_rounds=2", "algo.advantage=rloo", "algo.kl_coef=0.05", "algo.kl_in_reward=true",
    "algo.kl_estimator=k1", "algo.off_policy.mode=tis", "algo.loss_agg=seq-mean-token-mean", "algo.clip_high=0.28",
    "reward.overlong_buffer=2",
]


def test_dynamic_sampling_resume_equals_straight_run(assets, tmp_path):
    straight_run = _run(_config(assets, tmp_path / "straight", *DAPO_LIKE))
    run_dir = tmp_path / "run"
    _run(_config(assets, run_dir, *DAPO_LIKE), stop_after=STOP_AFTER)
    resumed = _run(_config(assets, run_dir, *DAPO_LIKE))
    assert resumed.start_rollout == 2
    rows = _rows(run_dir / "metrics.jsonl")
    assert rows == _rows(tmp_path / "straight" / "metrics.jsonl")
    assert sum(r["dynamic_sampling/rounds"] for r in rows) > 0  # extra rounds really ran
    assert sum(r["dynamic_sampling/groups_drawn"] for r in rows) > 4 * NUM_ROLLOUTS
    _assert_same_trainer_state(resumed.c.trainer, straight_run.c.trainer)
    assert resumed.c.sampler.state_dict() == straight_run.c.sampler.state_dict()


@pytest.mark.slow
def test_compiled_colocated_run_resumes_exactly(assets, tmp_path):
    """train.compile with colocate=true: the compiled layers' weights are offloaded and restored at
    every sleep and wake, and a stopped run, its graphs compiled again (dynamo reset, as in a new
    process), resumes to the straight compiled run's metrics and trainer state bit for bit."""
    mode = ["train.compile=true", "colocate=true", "checkpoint.async=true"]
    straight_run = _run(_config(assets, tmp_path / "straight", *mode))
    run_dir = tmp_path / "run"
    torch._dynamo.reset()
    _run(_config(assets, run_dir, *mode), stop_after=STOP_AFTER)
    torch._dynamo.reset()
    resumed = _run(_config(assets, run_dir, *mode))
    assert resumed.start_rollout == 2
    assert _rows(run_dir / "metrics.jsonl") == _rows(tmp_path / "straight" / "metrics.jsonl")
    assert read_jsonl(run_dir / "eval.jsonl") == read_jsonl(tmp_path / "straight" / "eval.jsonl")
    resumed.c.trainer.wake()
    straight_run.c.trainer.wake()
    _assert_same_trainer_state(resumed.c.trainer, straight_run.c.trainer)
    layers = [m for m in resumed.c.trainer.model.modules() if getattr(m, "_compiled_call_impl", None) is not None]
    assert len(layers) == resumed.c.trainer.model.config.num_hidden_layers
