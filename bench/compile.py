"""Train-step time with the decoder layers compiled (``train.compile``) against eager.

Two trainers of the same model, built by heron's own path (``build_trainer``), one with
``train.compile=true``, train on the same batch of bench/vs_trl.py's shape (32 rows: 5 prompt
and 32 response tokens, one micro-batch, one optimizer step), alternately, on the issue's 3.2 M
and 25 M shapes, in float32 and bf16 mixed precision (bf16 only on a CPU with it natively). The
compiled trainer's first step (the compile) is timed apart and not in the ratio. Last line per
case: ``compile: train_step_s_compiled_vs_eager=<median of the per-pair ratios>
first_step_s=<seconds>`` (< 1: compiled is faster; the first step is what a run pays once, from
inductor's cache when it holds the graph).

    OMP_NUM_THREADS=2 .venv/bin/python bench/compile.py [--precisions fp32,bf16] [--repeats 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from side_by_side import SHAPES, alternate, describe, random_batch, skips_emulated_bf16, toy_model

from heron.config.algo import AlgoConfig
from heron.config.model import ModelConfig
from heron.config.train import TrainConfig
from heron.trainer.build import TrainerSpec, build_trainer
from heron.trainer.policy_trainer import PolicyTrainer


def _trainer(model_dir: Path, precision: str, compile_model: bool, steps: int) -> PolicyTrainer:
    train = TrainConfig(lr=1e-5, micro_batch_size=32, precision=precision, compile=compile_model)
    return build_trainer(TrainerSpec(model=ModelConfig(path=str(model_dir)), train=train, algo=AlgoConfig(),
                                     policy_loss="", total_steps=steps, temperature=1.0, max_response_tokens=32,
                                     seed=0, allow_emulated_bf16=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    precisions = args.precisions.split(",")
    if "bf16" in precisions and skips_emulated_bf16("compile"):
        precisions.remove("bf16")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SHAPES.items():
            model_dir = toy_model(name, spec, Path(tmp))
            for precision in precisions:
                torch._dynamo.reset()
                steps = 2 * (args.repeats + 2)
                eager = _trainer(model_dir, precision, False, steps)
                compiled = _trainer(model_dir, precision, True, steps)
                batch = random_batch(eager.model.config.vocab_size, 5, [32] * 32)
                start = time.perf_counter()
                compiled.train(batch)
                first = time.perf_counter() - start
                times = alternate({"eager": lambda: eager.train(batch), "compiled": lambda: compiled.train(batch)},
                                  args.repeats)
                paired = statistics.median(c / e for c, e in zip(times["compiled"], times["eager"]))
                print(f"model {name}, {precision}, {torch.get_num_threads()} threads: {describe(times)}")
                print(f"compile: train_step_s_compiled_vs_eager={paired:.2f} first_step_s={first:.1f}  "
                      f"[{name.split()[0]}, {precision}]", flush=True)


if __name__ == "__main__":
    main()
