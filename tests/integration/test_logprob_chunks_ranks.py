"""train.logprob_chunk_size on data-parallel ranks (heron.trainer.lm_head_chunks), with two real
gloo ranks in subprocesses: the output head runs per chunk inside the wrapped model's own forward,
so FSDP2 still gathers the head's weight (the root unit's) for the forward and for the backward's
recompute and reduce-scatters its gradient, and DDP's reducer still sees the forward. The update
equals the whole head's within the round-off of another summation order (tests/tolerance.py,
rules 2 and 3), under both kinds of data parallelism; so does the update of the head at the
answer positions only (what the wrapped models get) against the head at every position."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_old_logprobs_ranks import LENGTH, MICRO, ROWS, _batch

WORLD, CHUNK = 2, 3


def _train(model_dir: str, kind: str, chunk_size: int, rank: int, out: Path, answers_only: bool = True) -> dict:
    from transformers import AutoModelForCausalLM

    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.parallel.data_parallel import apply_data_parallel
    from heron.parallel.dp_trainer import DataParallelTrainer
    from heron.trainer.objectives import PolicyObjective

    torch.manual_seed(0)
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    vocab = plain.config.vocab_size
    # eps = grad_clip = 1: AdamW's update is Lipschitz in the gradient (tests/tolerance.py, rule 3)
    cfg = TrainConfig(lr=1e-3, eps=1.0, micro_batch_size=MICRO, logprob_chunk_size=chunk_size, parallel=kind)
    trainer = DataParallelTrainer(apply_data_parallel(plain, kind), cfg, PolicyObjective(AlgoConfig()), total_steps=4)
    assert trainer._answers_only  # the wrapped model qualifies (heron.trainer.lm_head_chunks.plain_head_reason)
    trainer._answers_only = answers_only  # False: the head at every position, as before
    # prompts of 4 tokens (the loss starts at position 3): the answer positions are known
    batch = dataclasses.replace(_batch(vocab, rank), prompt_lengths=torch.full((ROWS,), 4))
    metrics = trainer.train(batch)
    weights = trainer.host_weights()  # full weights on rank 0, {} elsewhere
    if rank == 0:
        torch.save(weights, out)
    return metrics


def _scenarios(rank: int, tmp: Path, model_dir: str) -> dict:
    runs = {f"{kind}-{chunk}": _train(model_dir, kind, chunk, rank, tmp / f"{kind}-{chunk}.pt")
            for kind in ("fsdp2", "ddp") for chunk in (0, CHUNK)}
    for kind in ("fsdp2", "ddp"):
        runs[f"{kind}-every"] = _train(model_dir, kind, 0, rank, tmp / f"{kind}-every.pt", answers_only=False)
    return runs


@pytest.fixture(scope="module")
def ranks(toy_model_dir, tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("logprob_chunks_ranks")
    return on_gloo_ranks(_scenarios, WORLD, tmp, str(toy_model_dir)), tmp


@pytest.mark.parametrize("kind", ["fsdp2", "ddp"])
@pytest.mark.parametrize("variant", [CHUNK, "every"])
def test_chunked_head_ranks_give_the_whole_head_update(ranks, kind, variant, toy_model_dir):
    """``variant``: the head in chunks of CHUNK positions, or at every position, against the
    whole head at the answer positions."""
    from transformers import AutoModelForCausalLM

    from tests.tolerance import assert_sums_close, assert_updates_close, reduction_length

    results, tmp = ranks
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    whole, chunked = (torch.load(tmp / f"{kind}-{c}.pt", weights_only=True) for c in (0, variant))
    n = reduction_length(model.config, tokens=WORLD * ROWS * LENGTH)
    assert_updates_close(chunked, whole, initial, n=n, steps=1)
    log_vocab = math.log(model.config.vocab_size)
    for rank, result in enumerate(results):
        for key in ("loss", "entropy"):
            expected = result[f"{kind}-0"][key]
            assert_sums_close(result[f"{kind}-{variant}"][key], expected, n=n, magnitude=abs(expected) + log_vocab, what=f"{key} rank {rank}")
