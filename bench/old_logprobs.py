"""Train-step time with and without the separate old-logprob forward (issue 14, item 2).

Two trainers of the same model train on the same batch of one rollout in one optimizer step
(8 prompts x 4 samples, 12 prompt + 32 response tokens, train.micro_batch_size=8): one takes
pi_old from the training forward (``train.old_logprobs_forward=auto``), the other runs the
no-grad forward first (``always``, what every rollout did before). Calls alternate (in turn
first) to share machine noise; after one warm-up each, the ratio of medians and the ratio of
minima (on a shared machine the minimum is the run least disturbed by other processes) of the
wall time and of this process's CPU time. The last line per model is
``old_logprobs: train_step_s_skip_vs_recompute=<auto / always>`` (wall medians; < 1: the skip
is faster), then the other three ratios.

    OMP_NUM_THREADS=2 .venv/bin/python bench/old_logprobs.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.toy.addition import make_prompts
from heron.toy.model import ToyModelSpec, create_toy_model
from heron.trainer.batch import TrainBatch
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

NUM_ROWS, PROMPT_LEN, RESPONSE_LEN = 32, 12, 32
NUM_REPEATS = 15
SPECS = {
    "0.4M (toy)": ToyModelSpec(),
    "3.2M (hidden 256, 4 layers)": ToyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768),
}


def _batch(vocab_size: int) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    length = PROMPT_LEN + RESPONSE_LEN
    loss_mask = torch.zeros(NUM_ROWS, length - 1)  # [B, L-1]
    loss_mask[:, PROMPT_LEN - 1 :] = 1.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{i // 4}/s{i % 4}" for i in range(NUM_ROWS)],
        input_ids=torch.randint(0, vocab_size, (NUM_ROWS, length), generator=g),
        attention_mask=torch.ones(NUM_ROWS, length, dtype=torch.long), loss_mask=loss_mask,
        advantages=torch.randn(NUM_ROWS, generator=g), old_logprobs=torch.zeros(NUM_ROWS, length - 1),
    )


def _trainer(model_dir: Path, old_logprobs_forward: str) -> PolicyTrainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-5, old_logprobs_forward=old_logprobs_forward)
    return PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=2 * (NUM_REPEATS + 1))


def bench_model(name: str, spec: ToyModelSpec, tmp: Path) -> float:
    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    model_dir = create_toy_model(tmp / name.split()[0], corpus, spec)
    trainers = {"auto": _trainer(model_dir, "auto"), "always": _trainer(model_dir, "always")}
    batch = _batch(trainers["auto"].model.config.vocab_size)
    times: dict[str, list[float]] = {mode: [] for mode in trainers}
    cpu_times: dict[str, list[float]] = {mode: [] for mode in trainers}
    for repeat in range(NUM_REPEATS + 1):  # repeat 0 is the warm-up
        for mode, trainer in list(trainers.items())[:: 1 if repeat % 2 else -1]:
            start, cpu_start = time.perf_counter(), time.process_time()
            metrics = trainer.train(batch)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            assert metrics["old_logprobs_recomputed"] == float(mode == "always"), (mode, metrics)
            if repeat:
                times[mode].append(elapsed)
                cpu_times[mode].append(cpu)
    num_params = sum(p.numel() for p in trainers["auto"].model.parameters())
    print(f"model {name}: {num_params / 1e6:.2f} M params, {NUM_ROWS} rows x {PROMPT_LEN + RESPONSE_LEN} tokens, "
          f"{torch.get_num_threads()} threads")
    for mode, values in times.items():
        print(f"  {mode}: median {statistics.median(values):.3f} s/step wall, {statistics.median(cpu_times[mode]):.3f} "
              f"s/step CPU over {len(values)} steps (wall min {min(values):.3f}, max {max(values):.3f})")
    ratio = _ratio(times, statistics.median)
    print(f"old_logprobs: train_step_s_skip_vs_recompute={ratio:.2f} best_of={_ratio(times, min):.2f} "
          f"cpu_s={_ratio(cpu_times, statistics.median):.2f} cpu_s_best_of={_ratio(cpu_times, min):.2f}  [{name}]")
    return ratio


def _ratio(times: dict[str, list[float]], stat) -> float:
    return stat(times["auto"]) / stat(times["always"])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SPECS.items():
            bench_model(name, spec, Path(tmp))


if __name__ == "__main__":
    main()
