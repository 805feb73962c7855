"""Peak memory and time of a training step with and without activation checkpointing
(``train.gradient_checkpointing``, issue 12 item 2).

A random Qwen3 with many layers and a small vocabulary (so activations, not logits, dominate):
8 layers, hidden 256, vocabulary 2 k, 4 rows x 512 tokens, one forward + backward of the
trainer's logprobs. Peak memory above the step's start, each measurement in a fresh process
(bench/peak_memory.py). The order alternates over REPEATS. Last line:
``activation_checkpointing: peak_vs_off=<ratio> time_vs_off=<ratio>``.

    OMP_NUM_THREADS=2 .venv/bin/python bench/activation_checkpointing.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peak_memory import measure_in_child, report_step  # noqa: E402

ROWS, LENGTH, LAYERS = 4, 512, 8
REPEATS = 2


def child(checkpointing: bool) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from heron.trainer.activation_checkpointing import enable_activation_checkpointing
    from heron.trainer.logprobs import forward_logprobs

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=LENGTH)
    model = Qwen3ForCausalLM(config).float().train()
    if checkpointing:
        enable_activation_checkpointing(model)
    input_ids = torch.randint(0, config.vocab_size, (ROWS, LENGTH))  # [B, L]
    mask = torch.ones_like(input_ids)

    def step() -> float:
        start = time.perf_counter()
        logprobs, _ = forward_logprobs(model, input_ids, mask, 1.0)
        logprobs.sum().backward()
        model.zero_grad(set_to_none=False)  # keep the grads allocated: the same baseline every step
        return time.perf_counter() - start

    report_step(step)


def measure(checkpointing: bool) -> dict:
    return measure_in_child(__file__, str(int(checkpointing)))


def main() -> None:
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for repeat in range(REPEATS):
        for checkpointing in ((False, True) if repeat % 2 == 0 else (True, False)):
            runs[checkpointing].append(measure(checkpointing))
    peak = {c: statistics.median(r["peak_mib"] for r in rs) for c, rs in runs.items()}
    secs = {c: statistics.median(r["seconds"] for r in rs) for c, rs in runs.items()}
    print(f"{LAYERS} layers, {ROWS}x{LENGTH} tokens: peak above start off {peak[False]:.0f} MiB, on {peak[True]:.0f} MiB; "
          f"step off {secs[False]:.3f} s, on {secs[True]:.3f} s")
    print(f"activation_checkpointing: peak_vs_off={peak[True] / peak[False]:.2f} time_vs_off={secs[True] / secs[False]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2] == "1")
    else:
        main()
