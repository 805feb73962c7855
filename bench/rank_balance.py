"""train.balance_ranks: a data-parallel train step with each mini-batch's rows dealt to the ranks
for about equal work (heron.parallel.rank_balance) against contiguous equal shares, side by side
in one run.

Two real gloo ranks (FSDP2, one thread each: this machine's two cores), the 3.2 M bench model,
GRPO-shaped rollouts of 8 prompts x 4 samples with a 24-token prompt each. Every batch is drawn
from its own seed: each prompt gets a typical answer length (16-160 tokens) and its samples
0.5-1.5x that; each prompt's group has equal rewards (advantage 0, skipped by
train.skip_zero_advantage) with probability 0.4, as in a run where a task is part learned. So the
contiguous shares are as uneven as such rollouts make them, not a chosen worst case. Per batch:
both shares' work imbalance (largest rank over mean) and the step-time ratio, alternated after a
warm-up; the last line is the ratio of all the batches' steps together (what a run of such
rollouts would take), then the median and each batch's:
``rank_balance: train_step_s_dealt_vs_contiguous=<ratio> (...)`` (< 1: faster).

    .venv/bin/python bench/rank_balance.py [--batches 6] [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.side_by_side import SHAPES, toy_model  # noqa: E402
from heron.parallel.rank_balance import RankBalance, imbalance  # noqa: E402
from heron.parallel.shard_batch import rank_rows  # noqa: E402
from heron.trainer.batch import TrainBatch  # noqa: E402

WORLD, PROMPTS, SAMPLES, PROMPT = 2, 8, 4, 24
SHAPE = "3.2M (hidden 256, 4 layers)"


def rollout(vocab: int, seed: int) -> TrainBatch:
    """One GRPO-shaped rollout (see the module docstring), right-padded."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    answers, advantages = [], []
    for _ in range(PROMPTS):
        typical, solved_or_not = rng.randint(16, 160), rng.random() < 0.4
        answers += [max(4, round(typical * rng.uniform(0.5, 1.5))) for _ in range(SAMPLES)]
        advantages += [0.0 if solved_or_not else rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 1.0) for _ in range(SAMPLES)]
    rows, width = len(answers), PROMPT + max(answers)
    ids = torch.randint(3, vocab, (rows, width), generator=g)  # [B, L]
    for row in range(rows):
        ids[row, :PROMPT] = ids[row - row % SAMPLES, :PROMPT]  # a prompt's samples share it
    mask = (torch.arange(width)[None] < PROMPT + torch.tensor(answers)[:, None]).long()  # [B, L]
    loss_mask = mask[:, 1:].float()
    loss_mask[:, : PROMPT - 1] = 0.0
    return TrainBatch(
        rollout_id=seed, policy_version=0, sample_ids=[f"r{seed}/p{r // SAMPLES}/s{r % SAMPLES}" for r in range(rows)],
        input_ids=ids * mask, attention_mask=mask, loss_mask=loss_mask, advantages=torch.tensor(advantages),
        old_logprobs=torch.zeros(rows, width - 1), prompt_lengths=torch.full((rows,), PROMPT),
    )


def _trainer(model_dir: str):
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainConfig(lr=1e-6, micro_batch_size=4)
    return DataParallelTrainer(apply_data_parallel(model, "fsdp2"), cfg, PolicyObjective(AlgoConfig()), total_steps=10_000)


def _rank(rank: int, tmp: str, model_dir: str, batches: int, repeats: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=600))
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")  # transformers' output views, one per forward
    trainer = _trainer(model_dir)
    skips, rows = trainer.skips_zero_advantage_rows, trainer.cfg.micro_batch_size
    ways = {"contiguous": RankBalance(skips, deal=False), "dealt": RankBalance(skips, micro_batch_size=rows)}
    lines = []
    for seed in range(batches):
        batch = rollout(trainer.model.config.vocab_size, seed)
        shares = {name: rank_rows(batch, 1, WORLD, way) for name, way in ways.items()}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for repeat in range(repeats + 1):  # the first round warms up; the order flips every round
            for name in list(ways)[:: 1 if repeat % 2 else -1]:
                shard = batch.take(shares[name][rank], batch.input_ids.shape[1])
                dist.barrier()
                start = time.perf_counter()
                trainer.train(shard)  # ends in collectives: every rank leaves with the slowest
                if repeat:
                    times[name].append(time.perf_counter() - start)
        work = ways["dealt"].work(batch)
        ratio = statistics.median(times["dealt"]) / statistics.median(times["contiguous"])
        lines.append((seed, imbalance(shares["contiguous"], work), imbalance(shares["dealt"], work),
                      statistics.median(times["contiguous"]), statistics.median(times["dealt"]), ratio))
    if rank == 0:
        Path(tmp, "result.json").write_text(json.dumps(lines))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("TORCH_GLOO_LAZY_INIT", "1")  # as heron's ranks run (heron.device.prepare_process_groups)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = toy_model(SHAPE, SHAPES[SHAPE], Path(tmp))
        mp.spawn(_rank, args=(tmp, str(model_dir), args.batches, args.repeats), nprocs=WORLD)
        lines = json.loads(Path(tmp, "result.json").read_text())
    print(f"model {SHAPE}, {WORLD} gloo ranks (FSDP2, 1 thread each), {PROMPTS} prompts x {SAMPLES} samples per rollout")
    for seed, before, after, contiguous_s, dealt_s, ratio in lines:
        print(f"  batch {seed}: work imbalance contiguous {before:.2f} dealt {after:.2f}; "
              f"step contiguous {contiguous_s:.3f} s dealt {dealt_s:.3f} s: {ratio:.2f}x")
    ratios = [line[-1] for line in lines]
    total = sum(line[4] for line in lines) / sum(line[3] for line in lines)
    print(f"rank_balance: train_step_s_dealt_vs_contiguous={total:.2f} (all batches' steps together; "
          f"median per batch {statistics.median(ratios):.2f}, batches: {' '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
