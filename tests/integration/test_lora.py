"""LoRA (``model.lora``, heron.lora) on real toy RL runs with the real peft:

- the base weights never change and the optimizer, its state and the residency holdings hold
  the adapters only;
- the engine serves the merged weights: bit-identical to peft's ``merge_and_unload``, and its
  logits equal those of a transformers + peft merged model;
- k rollouts, stop, resume == the run straight through (adapters, optimizer state, metrics);
  colocated with offload == without;
- ``heron ckpt export-hf`` writes the merged model (transformers loads it) or, with
  ``--adapter``, the adapter folder (``PeftModel.from_pretrained`` loads it), both with the
  trainer's logits;
- the checkpoint holds the adapters, not the base weights.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from heron.checkpoint.dcp_io import live_state
from heron.cli import main as heron_main
from heron.config.root import load_config
from heron.models import load_model
from heron.reward.builtin import BUILTIN_REWARDS
from heron.tracking.metrics_file import read_jsonl
from tests.integration.test_checkpoint_resume import _assert_same_trainer_state, _rows, _run
from tests.run_compare import comparable

NUM_ROLLOUTS, STOP_AFTER = 4, 1  # checkpoints after rollouts 1 and 3
LORA = ["model.lora.enabled=true", "model.lora.rank=4", "model.lora.alpha=8"]
TOKENS = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18]])


def _length_reward(prompt, response: str) -> float:
    """Varies on the random toy model, so advantages (and adapter updates) are non-zero."""
    return len(response.strip()) / 8.0


@pytest.fixture(scope="module")
def assets(toy_model_dir, tmp_path_factory):
    from heron.toy.addition import write_splits

    paths = write_splits(tmp_path_factory.mktemp("lora_assets"), seed=0, max_digits=2, num_train=64, num_test=16)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BUILTIN_REWARDS, "lora_length", _length_reward)
        yield {"model": toy_model_dir, "train": paths["train"], "test": paths["test"]}


def _config(assets, run_dir: Path, *overrides: str):
    return load_config(None, [
        f"model.path={assets['model']}", f"data.path={assets['train']}", f"eval.path={assets['test']}",
        f"run.dir={run_dir}", "reward.fn=lora_length", f"rollout.num_rollouts={NUM_ROLLOUTS}",
        "rollout.batch_size=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=4",
        "train.lr=0.02", "train.steps_per_rollout=2", "train.micro_batch_size=4", "train.weight_decay=0.01",
        "eval.interval=2", "eval.max_prompts=4", "eval.max_new_tokens=4", "checkpoint.interval=2",
        "checkpoint.keep_last=0", "tracking.progress=false", "tracking.summary=false", "tracking.plot=false",
        *LORA, *overrides,
    ])


@pytest.fixture(scope="module")
def straight(assets, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lora_straight")
    return {"dir": run_dir, "run": _run(_config(assets, run_dir, "checkpoint.hf_export=true"))}


def _logits(model, tokens: torch.Tensor = TOKENS) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(tokens).logits
    model.train(was_training)
    return logits


def _peft_merged(trainer_model) -> torch.nn.Module:
    """What transformers + peft give for the trainer's adapters: ``merge_and_unload``."""
    return copy.deepcopy(trainer_model).merge_and_unload()


def _split(model) -> tuple[dict, dict]:
    """(base weights by HF name, adapter tensors by peft name) of a peft model."""
    base, adapters = {}, {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            adapters[name] = tensor
        else:
            base[name.removeprefix("base_model.model.").replace(".base_layer.", ".")] = tensor
    return base, adapters


def test_base_weights_never_change_and_only_adapters_train(assets, straight):
    trainer = straight["run"].c.trainer
    base, adapters = _split(trainer.model)
    original = load_model(str(assets["model"]), "float32").state_dict()
    assert base.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(base[name], tensor), name
    # the adapters moved: B starts at zero, and every B of every target layer is non-zero now
    b = [t for n, t in adapters.items() if ".lora_B." in n]
    assert len(b) == 2 * 7 and all(t.abs().sum() > 0 for t in b)  # 2 layers x q,k,v,o,gate,up,down
    trainable = {id(p) for p in trainer.model.parameters() if p.requires_grad}
    assert {id(p) for g in trainer.optimizer.param_groups for p in g["params"]} == trainable
    assert len(trainable) == len(adapters)
    assert all(id(p) in trainable for p in trainer.optimizer.state)
    assert [r["train/grad_norm"] > 0 for r in read_jsonl(straight["dir"] / "metrics.jsonl")] == [True] * NUM_ROLLOUTS


def test_residency_holdings_shrink_to_the_adapters(straight):
    """params: every weight (base + adapters: the base is still offloaded and restored);
    grads: the adapters' only; optimizer: AdamW's exp_avg and exp_avg_sq per adapter + its step."""
    trainer = straight["run"].c.trainer
    adapters = [p for p in trainer.model.parameters() if p.requires_grad]
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapters)
    all_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    step_bytes = sum(s["step"].numel() * s["step"].element_size() for s in trainer.optimizer.state.values())
    assert adapter_bytes * 5 < all_bytes  # rank 4 on hidden 64: the adapters are a small part
    report = trainer.memory_report()
    assert report["params"] == all_bytes and report["grads"] == 0  # zero_grad(set_to_none) after the step
    assert report["optimizer"] == 2 * adapter_bytes + step_bytes
    loss = _logits_with_grad(trainer.model)
    loss.backward()
    report = trainer.memory_report()
    assert report["grads"] == adapter_bytes
    assert all(p.grad is None for p in trainer.model.parameters() if not p.requires_grad)
    trainer.optimizer.zero_grad(set_to_none=True)


def _logits_with_grad(model) -> torch.Tensor:
    return model(TOKENS).logits.float().square().mean()


def test_engine_serves_the_merged_weights_with_peft_logits(straight):
    trainer, engine = straight["run"].c.trainer, straight["run"].c.engine
    assert engine.policy_version == trainer.version == NUM_ROLLOUTS
    merged = _peft_merged(trainer.model)
    served = engine.model.state_dict()
    expected = merged.state_dict()
    assert served.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(served[name], tensor), name
    # the same weights in the same architecture: the engine's logits are transformers + peft's
    torch.testing.assert_close(_logits(engine.model), _logits(merged), rtol=0, atol=0)


def test_checkpoint_holds_the_adapters_not_the_base(straight):
    from heron.checkpoint.reader import open_checkpoint

    ckpt = open_checkpoint(straight["dir"] / "checkpoints" / "rollout-000003")
    saved = ckpt.state["fingerprint"]["model"]
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert len(saved) == len(live_state(straight["run"].c.trainer.model, None)["model"])


@pytest.mark.parametrize("mode", [
    pytest.param(["checkpoint.async=false"], id="sync"),
    pytest.param(["checkpoint.async=true", "colocate=true"], id="async-colocate-offload"),
])
def test_stop_and_resume_equals_straight_run(assets, straight, tmp_path, mode):
    run_dir = tmp_path / "run"
    _run(_config(assets, run_dir, *mode), stop_after=STOP_AFTER)
    resumed = _run(_config(assets, run_dir, *mode))
    assert resumed.start_rollout == STOP_AFTER + 1
    assert _rows(run_dir / "metrics.jsonl") == _rows(straight["dir"] / "metrics.jsonl")
    assert read_jsonl(run_dir / "eval.jsonl") == read_jsonl(straight["dir"] / "eval.jsonl")
    resumed.c.trainer.wake()  # an offloaded trainer rests asleep; no-op otherwise
    _assert_same_trainer_state(resumed.c.trainer, straight["run"].c.trainer)
    for name, tensor in straight["run"].c.trainer.model.state_dict().items():  # base weights too
        assert torch.equal(resumed.c.trainer.model.state_dict()[name], tensor), name


def test_colocate_offload_is_bit_identical_to_no_offload(assets, straight, tmp_path):
    run = _run(_config(assets, tmp_path / "run", "colocate=true"))
    records = [comparable(r) for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert records == _rows(straight["dir"] / "metrics.jsonl")
    assert all(r["memory/trainer_released_bytes"] > 0 for r in read_jsonl(tmp_path / "run" / "metrics.jsonl"))
    run.c.trainer.wake()  # colocated: one of the two is awake at a time
    expected = straight["run"].c.trainer.model.state_dict()
    for name, tensor in run.c.trainer.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    run.c.engine.wake()
    served = straight["run"].c.engine.model.state_dict()
    for name, tensor in run.c.engine.model.state_dict().items():
        assert torch.equal(tensor, served[name]), name


def test_export_hf_merged_and_adapter_load_with_the_trainers_logits(assets, straight, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = straight["dir"] / "checkpoints" / "rollout-000003"
    assert heron_main(["ckpt", "export-hf", str(ckpt), str(tmp_path / "merged")]) == 0
    assert heron_main(["ckpt", "export-hf", str(ckpt), str(tmp_path / "adapter"), "--adapter"]) == 0
    trainer_model = straight["run"].c.trainer.model
    merged_logits = _logits(_peft_merged(trainer_model))
    for folder in (ckpt / "hf", tmp_path / "merged"):  # the save-time hf/ and the export: the merged model
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        torch.testing.assert_close(_logits(model), merged_logits, rtol=0, atol=0)
        assert AutoTokenizer.from_pretrained(folder).eos_token_id == model.generation_config.eos_token_id
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "adapter").iterdir()}
    assert not (tmp_path / "adapter" / "config.json").exists()
    adapted = PeftModel.from_pretrained(load_model(str(assets["model"]), "float32"), tmp_path / "adapter")
    torch.testing.assert_close(_logits(adapted), _logits(trainer_model), rtol=0, atol=0)
    assert AutoTokenizer.from_pretrained(tmp_path / "adapter").eos_token_id is not None


def test_export_adapter_of_a_full_checkpoint_fails_in_one_line(assets, tmp_path, capsys):
    from heron.loop import train
    from tests.toy_run import toy_run_overrides

    train(load_config(None, toy_run_overrides(assets["model"], assets["train"], tmp_path / "full", "rollout.num_rollouts=1")))
    ckpt = tmp_path / "full" / "checkpoints" / "rollout-000000"
    capsys.readouterr()  # the run's own output
    assert heron_main(["ckpt", "export-hf", str(ckpt), str(tmp_path / "out"), "--adapter"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"heron: error: checkpoint {ckpt} holds no LoRA adapters (model.lora.enabled=false); export it without --adapter"]
    assert not (tmp_path / "out").exists()
