"""Supervised warm start: a random toy model cannot find any reward, so ``heron sft``
briefly teaches it the answer format (prompt -> label + EOS) with the same trainer and an
NLL objective, and writes an HF folder that ``model.path`` can point at."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch
from tqdm import tqdm

from heron.atomic_file import publish_folder, temp_sibling
from heron.config.root import HeronConfig
from heron.config.train import TrainConfig
from heron.data.sampler import EpochSampler
from heron.device import place, resolve
from heron.models import load_model
from heron.preflight import preflight_sft
from heron.records import Prompt, Sample
from heron.rollout.prompt_format import PromptFormatter
from heron.run_dir import hold_sft_output
from heron.trainer.batch import collate
from heron.trainer.objectives import SFTObjective
from heron.trainer.policy_trainer import PolicyTrainer


def sft_output_dir(cfg: HeronConfig) -> Path:
    return Path(cfg.sft.output or Path(cfg.run.dir) / "sft-model")


def supervised_sample(prompt: Prompt, formatter: PromptFormatter, eos_id: int, step: int) -> Sample:
    """The label (+ EOS) as a response whose every token is in the loss."""
    answer = formatter.tokenizer(prompt.label, add_special_tokens=False)["input_ids"] + [eos_id]
    return Sample(
        rollout_id=step, prompt_id=prompt.prompt_id, sample_index=0, policy_version=0,
        prompt_tokens=formatter.encode(prompt), response_tokens=answer,
        response_logprobs=[0.0] * len(answer), loss_mask=[1] * len(answer),
        response_text=prompt.label, finish_reason="stop",
    )


def run_sft(cfg: HeronConfig, progress: bool = True) -> Path:
    """Trains ``sft.num_steps`` steps and writes the model + tokenizer to the SFT output folder.
    The output folder is locked for the whole run (a second sft into it fails at once) and
    appears only when complete (written beside it, then renamed)."""
    out = sft_output_dir(cfg)
    lock = hold_sft_output(out).acquire()  # before the checks: two sfts cannot both pass them
    try:
        model, formatter, examples = preflight_sft(cfg, out)  # one-line errors before the model loads
        _train_and_export(cfg, out, formatter, examples.prompts, progress)
    except BaseException:
        lock.release()
        raise
    lock.release(remove_file=True)
    return out


def _train_and_export(cfg: HeronConfig, out: Path, formatter: PromptFormatter, examples: list[Prompt], progress: bool) -> None:
    tokenizer = formatter.tokenizer
    torch.manual_seed(cfg.run.seed)
    sampler = EpochSampler(examples, seed=cfg.run.seed)
    train_cfg = TrainConfig(
        lr=cfg.sft.lr, warmup_steps=max(1, cfg.sft.num_steps // 20), lr_schedule="cosine",
        micro_batch_size=cfg.sft.batch_size, recompute_old_logprobs=False, grad_clip=1.0,
    )
    model = place(load_model(cfg.model.path, cfg.model.dtype), resolve(cfg.run.device))
    trainer = PolicyTrainer(model, train_cfg, SFTObjective(), total_steps=cfg.sft.num_steps)
    start = time.perf_counter()
    bar = tqdm(range(cfg.sft.num_steps), desc="sft", disable=None if progress else True, mininterval=1.0, dynamic_ncols=True)
    for step in bar:
        samples = [supervised_sample(p, formatter, tokenizer.eos_token_id, step) for p in sampler.take(cfg.sft.batch_size)]
        metrics = trainer.train(collate(samples, tokenizer.pad_token_id))
        bar.set_postfix(loss=f"{metrics['loss']:.3f}")
        if progress and bar.disable and (step + 1) % max(1, cfg.sft.num_steps // 5) == 0:
            print(f"sft: step {step + 1}/{cfg.sft.num_steps} loss {metrics['loss']:.4f}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_sibling(out)
    try:
        publish_folder(trainer.export_hf(temp, tokenizer), out)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    print(f"sft: {cfg.sft.num_steps} steps in {time.perf_counter() - start:.1f}s, final loss {metrics['loss']:.4f} -> {out}")
