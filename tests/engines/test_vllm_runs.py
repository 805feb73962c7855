"""Whole runs with ``engine.kind=vllm`` against real vLLM servers:

- the toy SFT + RL run learns (reward goes up), its pushes land (the engine/trainer logprob
  mismatch stays within the derived float tolerance at every rollout), and a kill -9 of the
  server mid-run fails it in one line naming the server and its log, without a hang, leaving
  its checkpoints intact; the resumed run then finishes;
- on the Ray backend, two engine actors each run a vLLM server and share the requests;
- a heron process killed by SIGKILL, together with its server (what Ray does to a killed
  actor), still takes vLLM's engine-core and worker processes with it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from heron.checkpoint.reader import find_latest, open_checkpoint
from heron.config.root import load_config
from heron.loop import train
from heron.rollout.server.errors import EngineServerError
from heron.sft import run_sft
from heron.toy.demo_assets import create_demo_assets
from tests.engines.conftest import assert_gone, server_tree, vllm_overrides
from tests.engines.tolerance import logprob_tolerance

pytestmark = pytest.mark.engines
NUM_ROLLOUTS, KILL_AFTER = 12, 5
REQUEST_TIMEOUT_S = 300  # the engine's per-call deadline in these runs: a hang fails before it


def _launchers() -> list[psutil.Process]:
    """vLLM launcher processes started (directly) by this process."""
    return [p for p in psutil.Process().children() if any("heron_vllm_launcher" in a for a in p.cmdline())]


def _kill_server_after_checkpoint(folder: Path, rollout_id: int, killed: dict) -> None:
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        latest = find_latest(folder) if folder.is_dir() else None
        if latest is not None and latest.state["rollout_id"] >= rollout_id:
            [launcher] = _launchers()
            killed["pid"], killed["at"] = launcher.pid, time.monotonic()
            launcher.kill()  # SIGKILL
            return
        time.sleep(0.1)


def _max_abs_logit(model_dir: Path, prompts: list[str]) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return max(float(model(**tokenizer(p, return_tensors="pt")).logits.abs().max()) for p in prompts)


def test_rl_run_learns_and_resumes_after_its_server_is_killed(vllm_venv, tmp_path):
    assets = create_demo_assets(tmp_path / "assets", max_digits=1, num_train=60)
    common = [
        f"data.path={assets['train']}", f"eval.path={assets['test']}", f"sft.path={assets['sft']}",
        "sft.num_steps=300", "sft.batch_size=32", f"rollout.num_rollouts={NUM_ROLLOUTS}", "rollout.batch_size=8",
        "rollout.samples_per_prompt=8", "rollout.max_new_tokens=4", "train.lr=5e-4", "train.micro_batch_size=32",
        "eval.interval=12",
    ]
    sft_model = run_sft(load_config(None, [f"run.dir={tmp_path / 'sft'}", f"model.path={assets['model']}", *common,
                                           "tracking.progress=false", "tracking.summary=false"]), progress=False)
    run_dir = tmp_path / "rl"
    cfg = load_config(None, vllm_overrides(
        sft_model, run_dir, *common, "checkpoint.interval=1", "checkpoint.hf_export=true", "colocate=true",
        f"engine.vllm.request_timeout_s={REQUEST_TIMEOUT_S}",
    ))
    killed: dict = {}
    watcher = threading.Thread(target=_kill_server_after_checkpoint, args=(run_dir / "checkpoints", KILL_AFTER, killed), daemon=True)
    watcher.start()
    with pytest.raises(EngineServerError) as error:
        train(cfg)
    failed_after = time.monotonic() - killed["at"]
    message = str(error.value)
    print(f"killed server pid {killed['pid']}; the run failed {failed_after:.1f} s later: {message}")
    assert failed_after < REQUEST_TIMEOUT_S
    assert "\n" not in message and "vLLM server 'engine'" in message and str(run_dir / "engine.log") in message
    latest = find_latest(run_dir / "checkpoints")
    assert latest is not None and latest.state["rollout_id"] >= KILL_AFTER
    open_checkpoint(latest.path)  # verifies every file's checksum: the checkpoint is intact

    resumed = train(cfg)  # checkpoint.load=auto: continues after the newest checkpoint
    assert [r["rollout_id"] for r in resumed] == list(range(latest.state["rollout_id"] + 1, NUM_ROLLOUTS))
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["rollout_id"] for r in rows] == list(range(NUM_ROLLOUTS))
    rewards = [r["reward/mean"] for r in rows]
    print("rewards", rewards)
    assert sum(rewards[-4:]) / 4 > rewards[0] + 0.2, rewards
    assert (run_dir / "engine.log").read_text().count("=== heron: starting vLLM server 'engine'") == 2  # appended

    # every push landed: the engine's logprobs are the trainer's, up to float round-off
    final_model = find_latest(run_dir / "checkpoints").path / "hf"
    prompts = [json.loads(line)["prompt"] for line in open(assets["train"])][:16]
    config = json.loads((Path(sft_model) / "config.json").read_text())
    max_logit = max(_max_abs_logit(Path(sft_model), prompts), _max_abs_logit(final_model, prompts))
    tol = logprob_tolerance(config, max_logit, cfg.rollout.temperature)
    mismatch = [r["train/engine_logprob_abs_diff_max"] for r in rows]
    print(f"engine/trainer logprob mismatch max per rollout {mismatch} (tolerance {tol:.2e})")
    assert max(mismatch) < tol
    assert all(r["memory/engine_device_bytes"] == 0 for r in rows)  # heron holds none of the server's memory


@pytest.mark.parametrize("transport", ["object_store", "broadcast"])
def test_ray_engine_actors_each_run_a_vllm_server_and_share_the_requests(vllm_venv, toy_model_dir, tmp_path, transport):
    import ray

    data = tmp_path / "train.jsonl"
    from heron.toy.addition import make_prompts, write_jsonl

    write_jsonl(make_prompts(16, seed=0, max_digits=2), data)
    run_dir = tmp_path / "run"
    cfg = load_config(None, vllm_overrides(
        toy_model_dir, run_dir, f"data.path={data}", "rollout.num_rollouts=2", "rollout.batch_size=4",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "train.micro_batch_size=8", "eval.interval=0",
        "cluster.backend=ray", "cluster.num_cpus=2", "cluster.num_engines=2", "cluster.cpus_per_bundle=0.5",
        f"cluster.weight_transport={transport}", "cluster.weight_bucket_mb=1",
    ))
    ray.shutdown()
    try:
        records = train(cfg)
    finally:
        ray.shutdown()
    assert [r["policy_version"] for r in records] == [1, 2]
    for name in ("engine-0", "engine-1"):
        log = (run_dir / f"{name}.log").read_text()
        assert f"=== heron: starting vLLM server '{name}'" in log
        assert log.count('"POST /v1/completions HTTP/1.1" 200') == 2 * 4 * 2 // 2  # half of each rollout's 8 requests
        assert log.count('"POST /collective_rpc HTTP/1.1" 200') >= 2  # the pushes reached both servers
        # broadcast: each server's worker received both pushes itself, in buckets of at most 1 MB
        received = [line for line in log.splitlines() if "received by broadcast" in line]
        assert len(received) == (2 if transport == "broadcast" else 0), received
        assert all(line.endswith("buckets, loaded") for line in received)


def test_a_sigkilled_heron_takes_its_vllm_process_tree_with_it(vllm_venv, toy_model_dir, tmp_path):
    owner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_vllm_owner.py")), str(toy_model_dir), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"the owner did not start its engine: {line!r}; see {tmp_path / 'engine.log'}"
        tree = server_tree(int(line))
        names = {p.name() for p in tree}
        assert len(tree) >= 4 and any(n.startswith("VLLM::") for n in names), names  # launcher, guardian, engine core, worker
        owner.send_signal(signal.SIGKILL)  # as Ray kills an actor: the actor and its direct child at once
        psutil.Process(int(line)).kill()
        owner.wait(timeout=60)
        assert_gone(tree)  # the engine core and worker too: the guardian stopped the group, then exited
    finally:
        owner.kill()
        owner.wait()
