"""LoRA on the Ray backend: two FSDP2 trainer ranks (frozen base shards beside trainable adapter
shards) colocated with an engine actor, with a KL term whose reference is each rank's sharded
policy with its adapters off. The run trains the adapters only (the checkpoint holds
them, the base weights in the merged model are unchanged where LoRA adds nothing), and what
rank 0 pushed is the merged model: the checkpoint's hf/ (written from the same host snapshot the
engines load) equals peft's merge of the saved adapters onto the base, bit for bit."""

from __future__ import annotations

import ray
import torch

from heron.checkpoint.reader import open_checkpoint
from heron.config.root import load_config
from heron.loop import train
from heron.models import load_model
from heron.reward.builtin import BUILTIN_REWARDS
from tests.tolerance import RAY_START


def _length_reward(prompt, response: str) -> float:
    """Varies on the random toy model (exact match is always 0 there), so the adapters move."""
    return len(response.strip()) / 8.0


def test_lora_run_on_ray_pushes_the_merged_adapters(no_ray, toy_model_dir, toy_data_path, tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    monkeypatch.setitem(BUILTIN_REWARDS, "lora_length", _length_reward)

    cfg = load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", "reward.fn=lora_length", f"run.dir={tmp_path / 'run'}",
        "rollout.num_rollouts=2", "rollout.batch_size=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=4",
        "train.micro_batch_size=4", "train.lr=0.02", "tracking.progress=false", "tracking.summary=false",
        "cluster.backend=ray", RAY_START, "cluster.num_cpus=2", "train.world_size=2", "train.parallel=fsdp2",
        "cluster.cpus_per_bundle=0.5", "colocate=true", "checkpoint.hf_export=true",
        "model.lora.enabled=true", "model.lora.rank=4", "model.lora.target_modules=[q_proj,v_proj]",
        "algo.kl_coef=0.1",  # the reference is each rank's policy with its adapters off (heron.lora.AdaptersDisabled)
    ])
    try:
        records = train(cfg)
    finally:
        ray.shutdown()
    assert [r["policy_version"] for r in records] == [1, 2] and all(r["train/grad_norm"] > 0 for r in records)
    assert records[0]["train/kl"] == 0 < records[1]["train/kl"]  # B starts at 0, then the adapters move off the base
    ckpt = tmp_path / "run" / "checkpoints" / "rollout-000001"
    saved = open_checkpoint(ckpt).state["fingerprint"]["model"]
    assert len(saved) == 2 * 2 * 2 and all(".lora_A." in k or ".lora_B." in k for k in saved)  # 2 layers x q,v x A,B
    assert main_export(ckpt, tmp_path / "adapter") == 0
    base = load_model(str(toy_model_dir), "float32")
    merged = PeftModel.from_pretrained(load_model(str(toy_model_dir), "float32"), tmp_path / "adapter").merge_and_unload()
    pushed = AutoModelForCausalLM.from_pretrained(ckpt / "hf", dtype=torch.float32).state_dict()
    expected = merged.state_dict()
    assert pushed.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(pushed[name], tensor), name
    changed = {n for n, t in base.state_dict().items() if not torch.equal(t, pushed[n])}
    assert changed and all(n.endswith(("q_proj.weight", "v_proj.weight")) for n in changed), sorted(changed)


def main_export(ckpt, out) -> int:
    from heron.cli import main

    return main(["ckpt", "export-hf", str(ckpt), str(out), "--adapter"])
