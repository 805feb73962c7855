"""Train-step time with the output head at every position against the answer positions only
(heron.trainer.lm_head_chunks), side by side in one run.

Two trainers of the same model take one optimizer step on the same GRPO-shaped batch
(``PROMPTS`` prompts x ``SAMPLES`` samples x ``ANSWER`` answer tokens, one micro-batch, shared
prompts where they pay, as a run trains): one with the head at the answer positions only (what
a run does for the listed model types), the other at every position of the batch (heron before
this, and what a model type off the list still gets). The model is a bench/vs_trl.py body with
a real vocabulary (``--vocab``, default Qwen3's 151,936, tied to the input embedding as in
Qwen3's small models): where the head is most of the FLOPs. Calls alternate (in turn first) to
share machine noise; after one warm-up each, the ratio of medians and of minima of the wall time.
The last line per case is ``answer_head: train_step_speedup=<every position / answers only>
[case]`` (> 1: scoring the answers only is faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/answer_head.py [--model 3M|25M] [--vocab N]  (default 3M)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_prompts import _batch  # noqa: E402
from bench.side_by_side import alternate, describe, ratio  # noqa: E402
from bench.vs_trl import MODELS  # noqa: E402
from heron.config.algo import AlgoConfig  # noqa: E402
from heron.config.train import TrainConfig  # noqa: E402
from heron.trainer.objectives import PolicyObjective  # noqa: E402
from heron.trainer.policy_trainer import PolicyTrainer  # noqa: E402

PROMPTS, SAMPLES, ANSWER, REPEATS = 8, 4, 32, 5
CASES = {"prompt 5 tokens (vs_trl)": 5, "prompt 96 tokens": 96}  # name -> prompt tokens


def _model_dir(folder: Path, model: str, vocab_size: int) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    spec = MODELS[model]
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                         num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
                         num_key_value_heads=spec.num_kv_heads, head_dim=spec.hidden_size // spec.num_heads,
                         max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=0)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder


def _trainer(model_dir: Path, answers_only: bool) -> PolicyTrainer:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-6, micro_batch_size=PROMPTS * SAMPLES)
    trainer = PolicyTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=4 * (REPEATS + 1))
    if not answers_only:
        trainer._answers_only = False  # the head at every position: heron before the answer positions
    return trainer


def bench_case(name: str, prompt_len: int, trainers: dict[str, PolicyTrainer]) -> float:
    batch = _batch(trainers["answers"].model.config.vocab_size, prompt_len, ANSWER)
    layout = trainers["answers"]._shared_layout(batch)
    positions = batch.input_ids.numel() if layout is None else layout.input_ids.numel()
    times = alternate({mode: lambda t=trainer: t.train(batch) for mode, trainer in trainers.items()}, REPEATS)
    print(f"{name}: {PROMPTS} prompts x {SAMPLES} samples x {ANSWER} answer tokens; the head at "
          f"{int(batch.answer_positions().sum())} answer positions or all {positions} "
          f"({'padded rows' if layout is None else 'shared prompts'})")
    print(f"  per step: {describe(times)}")
    speedup = 1 / ratio(times, "answers", "every position")
    best = 1 / ratio(times, "answers", "every position", stat=min)
    print(f"answer_head: train_step_speedup={speedup:.2f} best_of={best:.2f}  [{name}]")
    return speedup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="3M", choices=list(MODELS))
    parser.add_argument("--vocab", type=int, default=151_936)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _model_dir(Path(tmp), args.model, args.vocab)
        trainers = {"answers": _trainer(model_dir, True), "every position": _trainer(model_dir, False)}
        num_params = sum(p.numel() for p in trainers["answers"].model.parameters())
        print(f"model {args.model} body, vocabulary {args.vocab} ({num_params / 1e6:.1f} M params), fp32, "
              f"{torch.get_num_threads()} threads")
        for name, prompt_len in CASES.items():
            bench_case(name, prompt_len, trainers)


if __name__ == "__main__":
    main()
