"""Train-step time in float32 vs bf16 mixed precision (``train.precision``, issue 14 item 3).

Two trainers of the same model (float32 weights) train on the same batch of one rollout (8
prompts x 4 samples, 12 prompt + 32 response tokens, micro-batches of 8) in one optimizer
step, alternately, on the issue's 3.2 M and 25 M shapes. Last line per model:
``precision: train_step_s_bf16_vs_fp32=<median ratio> best_of=<ratio of minima>`` (< 1: bf16 is
faster; it needs a CPU with avx512-bf16/AMX or a GPU to be).

    OMP_NUM_THREADS=2 .venv/bin/python bench/precision.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from side_by_side import SHAPES, alternate, describe, random_batch, ratio, skips_emulated_bf16, toy_model

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

REPEATS = 6


def _trainer(model_dir: Path, precision: str) -> PolicyTrainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-5, micro_batch_size=8, precision=precision)
    return PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=2 * (REPEATS + 1))


def main() -> None:
    if skips_emulated_bf16("precision"):
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SHAPES.items():
            model_dir = toy_model(name, spec, Path(tmp))
            trainers = {p: _trainer(model_dir, p) for p in ("fp32", "bf16")}
            batch = random_batch(trainers["fp32"].model.config.vocab_size, 12, [32] * 32)
            times = alternate({p: (lambda t=t: t.train(batch)) for p, t in trainers.items()}, REPEATS)
            print(f"model {name}, {torch.get_num_threads()} threads: {describe(times)}")
            print(f"precision: train_step_s_bf16_vs_fp32={ratio(times, 'bf16', 'fp32'):.2f} "
                  f"best_of={ratio(times, 'bf16', 'fp32', min):.2f}  [{name}]")


if __name__ == "__main__":
    main()
