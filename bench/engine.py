"""Decode throughput of EmbeddedEngine against ``model.generate`` on the same toy model.

Both decode the same left-padded batch for exactly ``NUM_NEW_TOKENS`` sampled tokens per row
(no early stop: the engine gets no stop tokens, generate gets ``min_new_tokens``), so both
produce the same token count. Runs are interleaved to share machine noise; the last line is
``engine: tokens_per_s_vs_generate=<ours / generate>`` (> 1 means the engine is faster).

    OMP_NUM_THREADS=1 .venv/bin/python bench/engine.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from heron.records import GenerationRequest, SamplingParams
from heron.rollout import EmbeddedEngine
from heron.toy.addition import make_prompts
from heron.toy.model import ToyModelSpec, create_toy_model

BATCH_SIZE = 32
NUM_NEW_TOKENS = 64
NUM_REPEATS = 5
SPEC = ToyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768)


def main() -> None:
    from transformers import AutoTokenizer

    prompts = make_prompts(BATCH_SIZE, seed=1, max_digits=3)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
        model_dir = create_toy_model(Path(tmp), corpus, SPEC)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        engine = EmbeddedEngine.from_pretrained(model_dir)
    prompt_tokens = [tokenizer(p.text)["input_ids"] for p in prompts]
    requests = [
        GenerationRequest(tokens, SamplingParams(max_new_tokens=NUM_NEW_TOKENS, seed=i))
        for i, tokens in enumerate(prompt_tokens)
    ]
    hf_inputs = tokenizer([p.text for p in prompts], return_tensors="pt", padding=True)

    def run_engine() -> int:
        return sum(len(g.tokens) for g in engine.generate(requests))

    def run_generate() -> int:
        with torch.inference_mode():
            out = engine.model.generate(
                **hf_inputs, do_sample=True, use_cache=True, top_p=1.0, top_k=0,
                max_new_tokens=NUM_NEW_TOKENS, min_new_tokens=NUM_NEW_TOKENS,
            )
        return (out.shape[1] - hf_inputs["input_ids"].shape[1]) * out.shape[0]

    rates: dict[str, list[float]] = {"engine": [], "generate": []}
    for repeat in range(NUM_REPEATS + 1):  # repeat 0 is the warm-up
        for name, run in (("engine", run_engine), ("generate", run_generate)):
            start = time.perf_counter()
            num_tokens = run()
            elapsed = time.perf_counter() - start
            assert num_tokens == BATCH_SIZE * NUM_NEW_TOKENS, (name, num_tokens)
            if repeat:
                rates[name].append(num_tokens / elapsed)
    num_params = sum(p.numel() for p in engine.model.parameters())
    print(f"model: {num_params / 1e6:.2f} M params, batch {BATCH_SIZE}, {NUM_NEW_TOKENS} new tokens, "
          f"{torch.get_num_threads()} threads")
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(values):.0f} tokens/s over {len(values)} runs "
              f"(min {min(values):.0f}, max {max(values):.0f})")
    ratio = statistics.median(rates["engine"]) / statistics.median(rates["generate"])
    print(f"engine: tokens_per_s_vs_generate={ratio:.2f}")


if __name__ == "__main__":
    main()
