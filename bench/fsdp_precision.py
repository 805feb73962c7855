"""FSDP2's bf16 mixed precision (heron.parallel.data_parallel.fsdp_mixed_precision: the float32
shards cast to bfloat16 before the all-gather) against the float32 gather under autocast alone
(what ranks ran before it), both at ``train.precision=bf16``, side by side in one run.

Two real gloo ranks (FSDP2, one thread each: this machine's two cores), the 25 M bench model, a
GRPO-shaped batch of 32 rows (8 prompts x 4 samples, 5 prompt tokens, 24-32 answer tokens)
dealt 16 to each rank, one DataParallelTrainer step per call, the two variants alternated after
a warm-up round. Per variant: the median step time and the bytes each rank's all-gathers moved in
one step (counted at the ``torch.distributed`` call FSDP2 gathers with).
The reduce-scatter of the gradients is float32 in both. On a GPU cluster the gather's bytes are
NCCL traffic between devices; here they cross gloo's loopback, so the time ratio is this
machine's, not a cluster's. The last line is ``fsdp_precision: train_step_s_bf16_gather_vs_fp32=<ratio>
(all-gather bytes <ratio>)`` (< 1: faster, fewer bytes).

    .venv/bin/python bench/fsdp_precision.py [--repeats 4] [--model 25M|3.2M]
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench.side_by_side import SHAPES, random_batch, skips_emulated_bf16, toy_model  # noqa: E402

WORLD, ROWS, PROMPT = 2, 32, 5
MODELS = {"25M": "25M (hidden 512, 8 layers)", "3.2M": "3.2M (hidden 256, 4 layers)"}
VARIANTS = {"fp32 gather": {"precision": "fp32"}, "bf16 gather": {"precision": "bf16"}}  # apply_data_parallel's


GATHERS = ("all_gather_single", "all_gather_into_tensor")  # what FSDP2 gathers with: torch 2.13, older


class GatherBytes:
    """Counts the bytes this rank's weight all-gathers return (FSDP2's ``DefaultAllGather`` calls
    ``torch.distributed.all_gather_single``, ``all_gather_into_tensor`` before torch 2.13)."""

    def __init__(self):
        self.bytes = 0
        self._originals = {name: getattr(dist, name) for name in GATHERS if getattr(dist, name, None)}

    def __enter__(self):
        for name, gather in self._originals.items():
            setattr(dist, name, self._counted(gather))
        return self

    def _counted(self, gather):
        def counted(output_tensor, input_tensor, *args, **kwargs):
            self.bytes += output_tensor.numel() * output_tensor.element_size()
            return gather(output_tensor, input_tensor, *args, **kwargs)
        return counted

    def __exit__(self, *exc):
        for name, gather in self._originals.items():
            setattr(dist, name, gather)


def _trainer(model_dir: str, parallel: dict):
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    torch.manual_seed(0)
    model = apply_data_parallel(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), "fsdp2", **parallel)
    cfg = TrainConfig(lr=1e-6, micro_batch_size=ROWS // WORLD, precision="bf16")
    return DataParallelTrainer(model, cfg, PolicyObjective(AlgoConfig()), total_steps=10_000)


def _rank(rank: int, tmp: str, model_dir: str, variants: dict[str, dict], repeats: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=600))
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")  # transformers' output views, one per forward
    trainers = {name: _trainer(model_dir, parallel) for name, parallel in variants.items()}
    vocab = next(iter(trainers.values())).model.config.vocab_size
    lengths = [24 + (7 * row) % 9 for row in range(ROWS)]  # 24-32 answer tokens
    shard = random_batch(vocab, PROMPT, lengths).take(list(range(rank, ROWS, WORLD)), PROMPT + max(lengths))
    times: dict[str, list[float]] = {name: [] for name in trainers}
    gathered: dict[str, int] = {}
    for repeat in range(repeats + 1):  # the first round warms up; the order flips every round
        for name in list(trainers)[:: 1 if repeat % 2 else -1]:
            dist.barrier()
            with GatherBytes() as counter:
                start = time.perf_counter()
                trainers[name].train(shard)  # ends in collectives: every rank leaves with the slowest
                elapsed = time.perf_counter() - start
            if repeat:
                times[name].append(elapsed)
                gathered[name] = counter.bytes
    if rank == 0:
        Path(tmp, "result.json").write_text(json.dumps({"times": times, "gathered": gathered}))
    dist.destroy_process_group()
    # gloo's C++ threads can abort the interpreter's finalisation (SIGABRT, seen once here after
    # both ranks had finished, as in tests/gloo_ranks.py): the result is written, so leave without it
    sys.stdout.flush()
    os._exit(0)


def measure(model: str, variants: dict[str, dict], repeats: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each variant's step times over the rounds, and the bytes one step's all-gathers moved a rank."""
    os.environ.setdefault("TORCH_GLOO_LAZY_INIT", "1")  # as heron's ranks run (heron.device.prepare_process_groups)
    shape = MODELS[model]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = toy_model(shape, SHAPES[shape], Path(tmp))
        mp.spawn(_rank, args=(tmp, str(model_dir), variants, repeats), nprocs=WORLD)
        result = json.loads(Path(tmp, "result.json").read_text())
    print(f"model {shape}, {WORLD} gloo ranks (FSDP2, 1 thread each), train.precision=bf16, {ROWS} rows "
          f"({ROWS // WORLD} a rank), one train step a call, {repeats} alternated rounds after a warm-up")
    for name, seconds in result["times"].items():
        print(f"  {name}: step median {statistics.median(seconds):.3f} s ({' '.join(f'{s:.3f}' for s in seconds)}), "
              f"all-gathers {result['gathered'][name] / 1e6:.1f} MB a rank")
    return result["times"], result["gathered"]


def ratio_line(times: dict[str, list[float]], gathered: dict[str, int], new: str, old: str) -> str:
    """``<new's median step / old's> (all-gather bytes <new / old>; per round ...)``."""
    step = statistics.median(times[new]) / statistics.median(times[old])
    per_round = [n / o for n, o in zip(times[new], times[old])]
    return (f"{step:.2f} (all-gather bytes {gathered[new] / gathered[old]:.2f}; "
            f"per round {' '.join(f'{r:.2f}' for r in per_round)})")


def run(bench: str, variants: dict[str, dict], new: str, old: str, metric: str) -> None:
    """A bench's command line: measures ``variants`` and prints ``<bench>: <metric>=<new vs old>``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--model", default="25M", choices=list(MODELS))
    args = parser.parse_args()
    if skips_emulated_bf16(bench):
        return
    times, gathered = measure(args.model, variants, args.repeats)
    print(f"{bench}: {metric}={ratio_line(times, gathered, new, old)}")


if __name__ == "__main__":
    run("fsdp_precision", VARIANTS, "bf16 gather", "fp32 gather", "train_step_s_bf16_gather_vs_fp32")
