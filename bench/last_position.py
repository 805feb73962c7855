"""The padded layout's forward without each row's last position (heron.trainer.logprobs, since
2026-12-07), against the same forward over all L positions with the last one's logits dropped
(what heron ran before, and what TRL's trainer runs), side by side in one run.

The last position predicts nothing, so it is 1 of L positions of work the layers need not do:
what that is worth shows on short rows. bench/vs_trl.py's batch (its 5-token prompts do not pay
for the shared-prompt layout, so it runs padded): 32 rows of a 5-token prompt and 32 new
tokens, trained in one forward + backward of their summed logprobs (the policy's training pass),
the 25 M and 3.2 M bench models, float32 and, on a CPU with native bf16, bf16 autocast (the
trainer's ``train.precision=bf16`` forward context). Alternated after a warm-up, medians. The last
line: ``last_position: train_s_vs_all_positions_<model>_<precision>=<ratio> ...`` (< 1: faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/last_position.py [--repeats 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from side_by_side import SHAPES, alternate, describe, random_batch, ratio, skips_emulated_bf16, toy_model  # noqa: E402

from heron.trainer.logprobs import _sequence_logprobs, forward_logprobs  # noqa: E402
from heron.trainer.precision import forward_context  # noqa: E402

ROWS, PROMPT, NEW_TOKENS = 32, 5, 32


def _steps(model: torch.nn.Module, batch, context):
    def without_last() -> None:
        logprobs = forward_logprobs(model, batch.input_ids, batch.attention_mask, forward_context=context)[0]
        (logprobs * batch.loss_mask).sum().backward()
        model.zero_grad(set_to_none=True)

    def all_positions() -> None:  # the forward before: every position run, the last one's logits dropped
        head = {"temperature": 1.0, "with_entropy": False, "chunk_size": 0, "entropy_grad": True}
        logprobs = _sequence_logprobs(model, batch.input_ids, batch.input_ids[:, 1:],
                                      {"attention_mask": batch.attention_mask}, context, head)[0]
        (logprobs * batch.loss_mask).sum().backward()
        model.zero_grad(set_to_none=True)

    return {"without_last": without_last, "all_positions": all_positions}


def main() -> None:
    from transformers import AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    precisions = ["fp32"] + ([] if skips_emulated_bf16("last_position") else ["bf16"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in reversed(SHAPES.items()):
            model = AutoModelForCausalLM.from_pretrained(toy_model(name, spec, Path(tmp)), dtype=torch.float32)
            batch = random_batch(model.config.vocab_size, PROMPT, [NEW_TOKENS] * ROWS)
            for precision in precisions:
                times = alternate(_steps(model, batch, forward_context(precision, model)), args.repeats)
                print(f"{name} {precision}, {ROWS} x {batch.input_ids.shape[1]} tokens: {describe(times)}")
                results[f"{name.split()[0]}_{precision}"] = ratio(times, "without_last", "all_positions")
    print("last_position: " + " ".join(f"train_s_vs_all_positions_{k}={v:.2f}" for k, v in results.items()))


if __name__ == "__main__":
    main()
