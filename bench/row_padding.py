"""Row-count micro-batches (``train.max_tokens_per_micro_batch=0``, the default) cut to their own
longest row, against the same runs of rows padded to the batch's length (what heron ran until
2026-12-07), side by side in one run.

Where it shows: every forward that takes runs of rows in batch order -- the reference model's
(``algo.kl_coef > 0``), a separate pi_old forward, the critic's, and the policy's training forward
when every row trains (a KL or entropy term in the loss, ``train.skip_zero_advantage=false``) --
on rows that do not share a prompt (one sample per prompt, as PPO runs often are, or
``train.share_prompts=false``). The 3.2 M bench model, 32 rows of a 24-token prompt and an answer of
8-256 tokens (seeded), micro-batches of 1 row (what long answers on a GPU often need) and of 4.
Two measurements each, alternated after a warm-up: a no-grad forward of every micro-batch (a
reference or pi_old pass) and a forward + backward of their summed logprobs (a training pass).
The last line: ``row_padding: forward_s_cut_vs_padded_<rows>=<ratio> train_s_cut_vs_padded_<rows>=<ratio> ...``
(< 1: faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/row_padding.py
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from side_by_side import SHAPES, alternate, describe, random_batch, ratio, toy_model  # noqa: E402

from heron.trainer.batch import TrainBatch  # noqa: E402
from heron.trainer.logprobs import forward_logprobs  # noqa: E402
from heron.trainer.packing import micro_batches  # noqa: E402

REPEATS, ROWS, PROMPT, MICRO = 4, 32, 24, (1, 4)
SHAPE = "3.2M (hidden 256, 4 layers)"


def _passes(model: torch.nn.Module, parts: list[TrainBatch]):
    def forward() -> None:
        with torch.no_grad():
            for part in parts:
                forward_logprobs(model, part.input_ids, part.attention_mask)

    def train() -> None:
        for part in parts:
            logprobs = forward_logprobs(model, part.input_ids, part.attention_mask)[0]  # [b, l-1]
            (logprobs * part.loss_mask).sum().backward()
        model.zero_grad(set_to_none=True)

    return forward, train


def _measure(model: torch.nn.Module, batch: TrainBatch, micro: int) -> tuple[float, float]:
    cut = [part.batch for part in micro_batches(batch, micro, 0)]
    padded = list(batch.chunks(micro))
    (cut_forward, cut_train), (padded_forward, padded_train) = _passes(model, cut), _passes(model, padded)
    forward = alternate({"cut": cut_forward, "padded": padded_forward}, REPEATS)
    train = alternate({"cut": cut_train, "padded": padded_train}, REPEATS)
    positions = lambda parts: sum(p.input_ids.numel() for p in parts)  # noqa: E731
    print(f"micro-batches of {micro} rows: {positions(cut)} positions cut against {positions(padded)} padded")
    print(f"  no-grad forward: {describe(forward)}")
    print(f"  forward + backward: {describe(train)}")
    return ratio(forward, "cut", "padded"), ratio(train, "cut", "padded")


def main() -> None:
    from transformers import AutoModelForCausalLM

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = toy_model(SHAPE, SHAPES[SHAPE], Path(tmp))
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        batch = random_batch(model.config.vocab_size, PROMPT, [rng.randint(8, 256) for _ in range(ROWS)])
        print(f"model {SHAPE}, {ROWS} rows, answers 8..256 tokens ({int(batch.attention_mask.sum())} tokens)")
        results = {micro: _measure(model, batch, micro) for micro in MICRO}
    print("row_padding: " + " ".join(f"forward_s_cut_vs_padded_{m}={f:.2f} train_s_cut_vs_padded_{m}={t:.2f}"
                                     for m, (f, t) in results.items()) + " (by rows per micro-batch)")


if __name__ == "__main__":
    main()
