"""Real torch.distributed gloo ranks in subprocesses, without Ray: ``on_gloo_ranks(fn, ...)``
runs ``fn(rank, tmp, *args) -> dict`` on every rank of one process group and returns each
rank's dict (JSON, through ``tmp``). Several scenarios belong in one call: a spawn costs
seconds of imports. Inside a rank, ``rank_trainer`` builds a trainer rank as a Ray actor does and
``gathered_parameters`` names what is not a shard."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from heron.device import prepare_process_groups


def on_gloo_ranks(fn: Callable[..., dict], world_size: int, tmp: Path, *args, timeout_s: float = 120.0,
                  deadline_s: float = 600.0) -> list[dict]:
    """``timeout_s``: gloo's per-collective timeout; ``deadline_s``: for the whole call. A rank
    still running at the deadline (a hang outside any collective) is killed and the call fails
    naming it, instead of waiting for pytest's own timeout."""
    context = mp.spawn(_rank_main, args=(fn, world_size, str(tmp), args, timeout_s), nprocs=world_size, join=False)
    deadline = time.monotonic() + deadline_s
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            alive = [rank for rank, process in enumerate(context.processes) if process.is_alive()]
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"gloo ranks {alive} of {world_size} still running after {deadline_s:.0f} s; killed")
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world_size)]


def _rank_main(rank: int, fn, world_size: int, tmp: str, args: tuple, timeout_s: float) -> None:
    prepare_process_groups()  # as heron's ranks do (heron.device): gloo connects pairs on first use
    # FSDP2 warns when a unit returns a view, which an in-place op would cut off its backward
    # hook: heron's units return fresh tensors, and a scenario that finds one fails
    warnings.filterwarnings("error", message="FSDP2-wrapped module")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    try:
        torch.set_num_threads(1)
        result = fn(rank, Path(tmp), *args)
        Path(tmp, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        gc.collect()  # the scenario's trainers and their groups go while the interpreter is whole
        dist.destroy_process_group()
    # Interpreter finalisation can still abort in gloo's C++ threads ("terminate called without
    # an active exception", SIGABRT: seen once in CI, after both ranks had written their
    # results). The results are on disk, so the rank leaves without it, as a killed Ray actor does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def rank_trainer(model_dir: str, train, *, algo=None, lora=None, wrap: Callable | None = None):
    """A DataParallelTrainer of ``model_dir`` on this rank, built as a Ray trainer actor builds it
    once it joined the group (heron.cluster.trainer_group.build_trainer_rank): torch seeded with the
    spec's seed, then build_trainer with its RankSpec's ``rank_parallelize`` (``train.parallel``,
    ``train.precision``, ``train.reshard_after_forward``); ``wrap(parallelize)`` replaces that where
    a test builds the rank another way."""
    from heron.cluster.rank_spec import RankSpec, rank_parallelize
    from heron.config.algo import AlgoConfig
    from heron.config.model import LoraConfig, ModelConfig
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.build import TrainerSpec, build_trainer

    spec = TrainerSpec(model=ModelConfig(path=model_dir, lora=lora or LoraConfig()), train=train,
                       algo=algo or AlgoConfig(), policy_loss="", total_steps=4, temperature=1.0,
                       max_response_tokens=8, seed=0, allow_emulated_bf16=True)
    parallelize = rank_parallelize(RankSpec(spec, dist.get_world_size(), train.parallel, "cpu", 60.0))
    torch.manual_seed(spec.seed)
    return build_trainer(spec, parallelize=wrap(parallelize) if wrap else parallelize, trainer_cls=DataParallelTrainer)


def gathered_parameters(*models: torch.nn.Module) -> list[str]:
    """Names of the parameters not held as FSDP2 shards: gathered ones, or all of a whole model's."""
    from torch.distributed.tensor import DTensor

    return [n for m in models for n, p in m.named_parameters() if not isinstance(p, DTensor)]
