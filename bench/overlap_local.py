"""Would overlapping generation with training pay on the local backend (issue 14, item 6)?

On one machine the two stages would share its cores: generation on one thread and the train
step on another, each with half the intra-op threads, instead of one after the other with all
of them. This measures both ways in one run on the bench models' shapes (32 rows: 8 prompts x
4 samples, 16 prompt + 32 new tokens; one AdamW step on 32 x 48 tokens), with HF ``generate``
standing in for the engine (same matmuls). The last line per model is
``overlap_local: <model> sequential/overlapped=<ratio>`` (> 1: overlap is faster).

    .venv/bin/python bench/overlap_local.py [--models 3M,25M] [--repeats 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.vs_trl import MODELS  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402

ROWS, PROMPT_TOKENS, NEW_TOKENS = 32, 16, 32


def _stages(model_dir: Path):
    from transformers import AutoModelForCausalLM

    engine = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    vocab = policy.config.vocab_size
    prompts = torch.randint(3, vocab, (ROWS, PROMPT_TOKENS))
    batch = torch.randint(3, vocab, (ROWS, PROMPT_TOKENS + NEW_TOKENS))

    def generate() -> None:
        with torch.no_grad():
            engine.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=NEW_TOKENS,
                            min_new_tokens=NEW_TOKENS, do_sample=True, pad_token_id=0)

    def train_step() -> None:
        logprobs = policy(batch).logits[:, :-1].float().log_softmax(-1)  # [B, T-1, V]
        loss = -logprobs.gather(-1, batch[:, 1:, None]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return generate, train_step


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _overlapped(generate, train_step, threads_each: int) -> float:
    def run(fn):
        torch.set_num_threads(threads_each)  # per thread: each stage gets its share of the cores
        fn()

    workers = [threading.Thread(target=run, args=(fn,)) for fn in (generate, train_step)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def bench_model(name: str, tmp: Path, repeats: int) -> float:
    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    generate, train_step = _stages(create_toy_model(tmp / name, corpus, MODELS[name]))
    cores = torch.get_num_threads()
    generate(), train_step()  # warm-up
    sequential, overlapped = [], []
    for _ in range(repeats):  # alternated, so drift on a noisy machine hits both
        torch.set_num_threads(cores)
        g, t = _timed(generate), _timed(train_step)
        sequential.append(g + t)
        overlapped.append(_overlapped(generate, train_step, max(cores // 2, 1)))
        print(f"  {name}: sequential generate={g:.2f}s train={t:.2f}s sum={g + t:.2f}s | "
              f"overlapped wall={overlapped[-1]:.2f}s", flush=True)
    torch.set_num_threads(cores)
    return statistics.median(sequential) / statistics.median(overlapped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="3M,25M")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ratios = {name: bench_model(name, Path(tmp), args.repeats) for name in args.models.split(",")}
    for name, ratio in ratios.items():
        print(f"overlap_local: {name} sequential/overlapped={ratio:.2f} on {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
