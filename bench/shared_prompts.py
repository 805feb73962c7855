"""Train-step time with and without the shared-prompt layout (``train.share_prompts``,
heron.trainer.shared_prompts), side by side in one run.

Two trainers of the same model take one optimizer step on the same GRPO-shaped batch
(``PROMPTS`` prompts x ``SAMPLES`` samples, every answer as long as the case says, one micro-batch):
one packs each prompt's samples into one row (``share_prompts=true``), the other trains one padded
row per sample (``false``). Calls alternate (in turn first) to share machine noise; after one
warm-up each, the ratio of medians and of minima of the wall time. Cases: the prompt length of
bench/vs_trl.py's addition problems (5 tokens), a longer prompt (a chat-templated problem), and
that prompt with long answers (where the packed row's attention would dominate if it were one
dense [S, S] mask: heron.trainer.grouped_attention), and that prompt under a token budget
(``train.max_tokens_per_micro_batch``, ``BUDGET``): the budget counts the tokens each forward
holds, so shared micro-batches take more rows and the step runs fewer forwards (each side's
count is printed).
The last line per case is ``shared_prompts: train_step_speedup=<padded / shared>  [case]``
(> 1: sharing is faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/shared_prompts.py [--model 3M|25M] [--precision fp32|bf16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.vs_trl import MODELS  # noqa: E402
from heron.config.algo import AlgoConfig  # noqa: E402
from heron.config.train import TrainConfig  # noqa: E402
from heron.records import Sample  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402
from heron.trainer.batch import TrainBatch, collate  # noqa: E402
from heron.trainer.objectives import PolicyObjective  # noqa: E402
from heron.trainer.policy_trainer import PolicyTrainer  # noqa: E402

PROMPTS, SAMPLES, REPEATS = 8, 4, 8
BUDGET = 1024  # tokens per micro-batch of the budget case: 8 padded rows of 128 tokens, 4 shared groups of 227
CASES = {  # name -> (prompt tokens, answer tokens, train.max_tokens_per_micro_batch)
    "prompt 5 tokens (vs_trl)": (5, 32, 0), "prompt 96 tokens": (96, 32, 0), "prompt 96 tokens, answers 128": (96, 128, 0),
    f"prompt 96 tokens, budget {BUDGET} tokens": (96, 32, BUDGET),
}


def _batch(vocab_size: int, prompt_len: int, answer_len: int) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    samples = []
    for p in range(PROMPTS):
        prompt = torch.randint(3, vocab_size, (prompt_len,), generator=g).tolist()
        for s in range(SAMPLES):
            answer = torch.randint(3, vocab_size, (answer_len,), generator=g).tolist()
            samples.append(Sample(0, p, s, 0, prompt, answer, [-1.0] * answer_len, [1] * answer_len, "", "length",
                                  advantage=float(torch.randn((), generator=g))))
    return collate(samples, pad_token_id=0)


def _trainer(model_dir: Path, share: bool, precision: str, budget: int = 0) -> PolicyTrainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-6, micro_batch_size=PROMPTS * SAMPLES, share_prompts=share, precision=precision,
                      max_tokens_per_micro_batch=budget)
    return PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=4 * (REPEATS + 1))


def bench_case(name: str, prompt_len: int, answer_len: int, trainers: dict[str, PolicyTrainer]) -> float:
    batch = _batch(trainers["shared"].model.config.vocab_size, prompt_len, answer_len)
    layout = trainers["shared"]._shared_layout(batch)
    forwards = {mode: len(trainer._micro_batches(batch)) for mode, trainer in trainers.items()}
    times: dict[str, list[float]] = {mode: [] for mode in trainers}
    for repeat in range(REPEATS + 1):  # repeat 0 is the warm-up
        for mode, trainer in list(trainers.items())[:: 1 if repeat % 2 else -1]:
            start = time.perf_counter()
            trainer.train(batch)
            if repeat:
                times[mode].append(time.perf_counter() - start)
    rows = "padded rows (not shared: the estimate saves less than MIN_SAVING)" if layout is None else (
        f"{tuple(layout.input_ids.shape)} packed vs {tuple(batch.input_ids.shape)} padded")
    print(f"{name}: {PROMPTS} prompts x {SAMPLES} samples x {answer_len} answer tokens, {rows}")
    for mode, values in times.items():
        print(f"  {mode}: {forwards[mode]} forward(s), median {statistics.median(values):.3f} s/step (min {min(values):.3f}, max {max(values):.3f})")
    ratio = statistics.median(times["padded"]) / statistics.median(times["shared"])
    best = min(times["padded"]) / min(times["shared"])
    print(f"shared_prompts: train_step_speedup={ratio:.2f} best_of={best:.2f}  [{name}]")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="3M", choices=list(MODELS))
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
        model_dir = create_toy_model(Path(tmp) / "model", corpus, MODELS[args.model])
        by_budget: dict[int, dict[str, PolicyTrainer]] = {}  # the two trainers of each budget, built once
        for budget in sorted({case[2] for case in CASES.values()}):
            by_budget[budget] = {"shared": _trainer(model_dir, True, args.precision, budget),
                                 "padded": _trainer(model_dir, False, args.precision, budget)}
        num_params = sum(p.numel() for p in by_budget[0]["shared"].model.parameters())
        print(f"model {args.model} ({num_params / 1e6:.1f} M params), {args.precision}, {torch.get_num_threads()} threads")
        for name, (prompt_len, answer_len, budget) in CASES.items():
            bench_case(name, prompt_len, answer_len, by_budget[budget])


if __name__ == "__main__":
    main()
