"""Peak memory of the training logprobs: the whole [B, T, V] logits and log-softmax vs the output
head run in chunks of positions (``train.logprob_chunk_size``, heron.trainer.lm_head_chunks; issue 14
item 5).

A tiny random Qwen3 (hidden 64, 2 layers) with a 32 k and a 152 k (Qwen's) vocabulary, 2 rows x
128 tokens: one forward + backward of logprobs and entropy (the trainer's training forward), once
whole (chunk 0) and once in chunks of 16 positions, both with the entropy in the loss (an entropy
bonus); and once whole with the entropy a metric only (``entropy_grad=False``: what the trainer
runs without ``algo.entropy_coef``, so autograd keeps no ``exp(log_softmax)``). Peak memory above the step's start, each
measurement in a fresh process (bench/peak_memory.py). The order of the two modes alternates over repeats (REPEATS; 1 on a loaded 2-core machine). Last line per vocabulary:
``logprob_memory: peak_chunked_vs_full=<ratio> time_chunked_vs_full=<ratio>
peak_metric_entropy_vs_full=<ratio> [V=...]``.

    OMP_NUM_THREADS=2 .venv/bin/python bench/logprob_memory.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peak_memory import measure_in_child, report_step  # noqa: E402

ROWS, LENGTH, CHUNK = 2, 128, 16
VOCABS = (32_000, 151_936)
REPEATS = 1


def child(vocab_size: int, chunk_size: int, metric_entropy: bool) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from heron.trainer.logprobs import forward_logprobs

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=LENGTH)
    model = Qwen3ForCausalLM(config).float()
    input_ids = torch.randint(0, vocab_size, (ROWS, LENGTH))  # [B, L]
    mask = torch.ones_like(input_ids)

    def step() -> float:
        start = time.perf_counter()
        logprobs, entropy = forward_logprobs(model, input_ids, mask, 1.0, with_entropy=True, chunk_size=chunk_size,
                                             entropy_grad=not metric_entropy)
        (logprobs.sum() - (0 if metric_entropy else 0.01) * entropy.sum()).backward()
        model.zero_grad(set_to_none=False)  # keep the grads allocated: the same baseline every step
        return time.perf_counter() - start

    report_step(step)


MODES = {"full": (0, False), "chunks": (CHUNK, False), "metric": (0, True)}  # name -> (chunk size, metric entropy)


def measure(vocab_size: int, mode: str) -> dict:
    chunk, metric = MODES[mode]
    return measure_in_child(__file__, str(vocab_size), str(chunk), str(int(metric)))


def main() -> None:
    for vocab in VOCABS:
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for repeat in range(REPEATS):
            for mode in list(MODES)[:: 1 if repeat % 2 == 0 else -1]:
                runs[mode].append(measure(vocab, mode))
        peak = {c: statistics.median(r["peak_mib"] for r in rs) for c, rs in runs.items()}
        secs = {c: statistics.median(r["seconds"] for r in rs) for c, rs in runs.items()}
        full_tensor = ROWS * (LENGTH - 1) * vocab * 4 / 2**20
        print(f"V={vocab}: one [B, T, V] float32 = {full_tensor:.0f} MiB; peak above start: full {peak['full']:.0f} MiB, "
              f"chunks of {CHUNK} {peak['chunks']:.0f} MiB, full with a metric entropy {peak['metric']:.0f} MiB; "
              f"step full {secs['full']:.3f} s, chunked {secs['chunks']:.3f} s")
        print(f"logprob_memory: peak_chunked_vs_full={peak['chunks'] / peak['full']:.2f} "
              f"time_chunked_vs_full={secs['chunks'] / secs['full']:.2f} "
              f"peak_metric_entropy_vs_full={peak['metric'] / peak['full']:.2f}  [V={vocab}, {ROWS}x{LENGTH} tokens]")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(int(sys.argv[2]), int(sys.argv[3]), bool(int(sys.argv[4])))
    else:
        main()
