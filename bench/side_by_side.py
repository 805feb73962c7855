"""Shared by the trainer benches: toy model shapes, a synthetic rollout batch, and timing two
(or more) variants of a train step alternately on the same batch (so they share machine noise)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from heron.toy.addition import make_prompts
from heron.toy.model import ToyModelSpec, create_toy_model
from heron.trainer.batch import TrainBatch

SHAPES = {  # the model sizes (Qwen3, random weights, the toy tokenizer)
    "3.2M (hidden 256, 4 layers)": ToyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768),
    "25M (hidden 512, 8 layers)": ToyModelSpec(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=1536),
}


def toy_model(name: str, spec: ToyModelSpec, tmp: Path) -> Path:
    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    return create_toy_model(tmp / name.split()[0], corpus, spec)


def random_batch(vocab_size: int, prompt_len: int, response_lens: list[int]) -> TrainBatch:
    """Right-padded rows of ``prompt_len`` prompt tokens and ``response_lens[i]`` response tokens."""
    g = torch.Generator().manual_seed(0)
    rows, length = len(response_lens), prompt_len + max(response_lens)
    input_ids = torch.randint(0, vocab_size, (rows, length), generator=g)  # [B, L]
    attention_mask = torch.zeros(rows, length, dtype=torch.long)  # [B, L]
    loss_mask = torch.zeros(rows, length - 1)  # [B, L-1]
    for i, r in enumerate(response_lens):
        attention_mask[i, : prompt_len + r] = 1
        loss_mask[i, prompt_len - 1 : prompt_len - 1 + r] = 1.0
    return TrainBatch(
        rollout_id=0, policy_version=0, sample_ids=[f"r0/p{i // 4}/s{i % 4}" for i in range(rows)],
        input_ids=input_ids, attention_mask=attention_mask, loss_mask=loss_mask,
        advantages=torch.randn(rows, generator=g), old_logprobs=torch.zeros(rows, length - 1),
    )


def alternate(steps: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each step over ``repeats`` rounds after one warm-up round; the order of
    the variants flips every round."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for repeat in range(repeats + 1):
        for name, step in list(steps.items())[:: 1 if repeat % 2 else -1]:
            start = time.perf_counter()
            step()
            if repeat:
                times[name].append(time.perf_counter() - start)
    return times


def describe(times: dict[str, list[float]]) -> str:
    return ", ".join(f"{name} median {statistics.median(t):.3f} s (min {min(t):.3f})" for name, t in times.items())


def ratio(times: dict[str, list[float]], new: str, old: str, stat=statistics.median) -> float:
    return stat(times[new]) / stat(times[old])


def skips_emulated_bf16(bench: str) -> bool:
    """False where this CPU computes bf16 natively; else prints the one line ``bench`` shows in
    place of its bf16 figures and returns True. Why skip: torch emulates bf16 on such a CPU (a
    25 M train step took ~27x its float32 time on an AVX2 machine, docs/gpu.md), so a bf16 figure
    there measures the emulation and the run takes hours."""
    from heron.device import HOST, native_bf16

    if native_bf16(HOST):
        return False
    print(f"{bench}: bf16 skipped: this CPU has no avx512-bf16 or AMX, so torch would emulate bf16; "
          "its figures are measured on a CPU or GPU with native bf16")
    return True
