"""Train-step time with micro-batches packed by a token budget vs by a row count
(``train.max_tokens_per_micro_batch``, issue 14 item 5).

One rollout of 32 rows, 12 prompt tokens and response lengths spread evenly over 4..64 tokens
(as EOS ends GRPO samples at different lengths), on the 3.2 M shape. Rows: micro-batches of 8
rows padded to the longest row of the batch; packed: the same token budget (8 x the padded
length), rows sorted by length, each micro-batch cut to its own longest row. Alternated after a
warm-up. Last line: ``packing: train_step_s_packed_vs_rows=<median ratio> best_of=<minima>``
and the share of padded positions each way.

    OMP_NUM_THREADS=2 .venv/bin/python bench/packing.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from side_by_side import SHAPES, alternate, describe, random_batch, ratio, toy_model

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.trainer.objectives import PolicyObjective
from heron.trainer.packing import micro_batches
from heron.trainer.policy_trainer import PolicyTrainer

REPEATS, ROWS, PROMPT, MICRO = 6, 32, 12, 8
SHAPE = "3.2M (hidden 256, 4 layers)"


def _trainer(model_dir: Path, max_tokens: int) -> PolicyTrainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-5, micro_batch_size=MICRO, max_tokens_per_micro_batch=max_tokens)
    return PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=2 * (REPEATS + 1))


def _padding(batch, max_tokens: int) -> float:
    parts = micro_batches(batch, MICRO, max_tokens)
    positions = sum(p.batch.input_ids.numel() for p in parts)
    return 1 - float(batch.attention_mask.sum()) / positions


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = toy_model(SHAPE, SHAPES[SHAPE], Path(tmp))
        responses = [4 + round(60 * i / (ROWS - 1)) for i in range(ROWS)]
        responses = responses[::2] + responses[1::2]  # not already sorted
        probe = _trainer(model_dir, 0)
        batch = random_batch(probe.model.config.vocab_size, PROMPT, responses)
        budget = MICRO * batch.input_ids.shape[1]
        trainers = {"rows": probe, "packed": _trainer(model_dir, budget)}
        times = alternate({k: (lambda t=t: t.train(batch)) for k, t in trainers.items()}, REPEATS)
        print(f"model {SHAPE}, {ROWS} rows, responses 4..64 tokens, budget {budget} tokens: {describe(times)}")
        print(f"packing: train_step_s_packed_vs_rows={ratio(times, 'packed', 'rows'):.2f} "
              f"best_of={ratio(times, 'packed', 'rows', min):.2f} padding_rows={_padding(batch, 0):.2f} "
              f"padding_packed={_padding(batch, budget):.2f}")


if __name__ == "__main__":
    main()
