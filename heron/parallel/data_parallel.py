"""The one place where a model is made data-parallel, and the collectives the trainer needs.

FSDP2 (``fully_shard``, the default) shards parameters, gradients and optimizer state across
ranks: each repeated block (every child of an ``nn.ModuleList``, i.e. the decoder layers) is
one FSDP unit, the root holds the rest (embeddings, tied head, final norm). DDP replicates the
model and all-reduces gradients. Both *average* gradients over ranks, which is why
``DataParallelTrainer`` divides its loss by ``global_tokens / world_size`` (see there).

gloo on CPU, nccl on CUDA. Every collective inherits the process group's timeout, so a dead
or hung rank raises instead of blocking forever.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

from heron.device import collective_backend, prepare_process_groups

ParallelKind = Literal["fsdp2", "ddp"]

_group_timeout: timedelta | None = None  # this process's trainer group's, for the groups made after it


def init_process_group(rank: int, world_size: int, store, *, device: str = "cpu", timeout_s: float = 300.0) -> None:
    """Joins the trainer group through ``store`` (a ``TCPStore``, see ``heron.cluster.rendezvous``);
    ``timeout_s`` bounds the rendezvous and every later collective, also those of the groups
    made later for one purpose (``group_timeout``)."""
    global _group_timeout
    _group_timeout = timedelta(seconds=timeout_s)
    prepare_process_groups()  # gloo connects pairs on first use (heron.device)
    dist.init_process_group(
        backend=collective_backend(device),
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=_group_timeout,
    )


def group_timeout() -> timedelta | None:
    """The trainer group's collective deadline; None where heron did not create the group (torch's
    default applies). ``dist.new_group`` does not inherit it: without it, a group gets 30 min."""
    return _group_timeout


def apply_data_parallel(model: torch.nn.Module, kind: ParallelKind, precision: str = "fp32",
                        reshard_after_forward: bool = True, frozen: bool = False) -> torch.nn.Module:
    """Returns the model to train: the same module sharded in place (fsdp2) or a DDP wrapper.
    ``precision`` is ``train.precision``: under FSDP2, bf16 all-gathers the weights in bfloat16
    (``fsdp_mixed_precision``); DDP leaves it to the trainer's autocast.
    ``reshard_after_forward`` (``train.reshard_after_forward``, FSDP2 only): whether each block
    frees its gathered weights after its forward (gathering them again for its backward) or keeps
    them until its backward frees them: one all-gather a micro-batch instead of two, for holding
    every block's gathered weights from forward to backward. The root unit is never resharded
    after its forward (FSDP2's own rule: its backward comes first).
    ``frozen``: a model that only runs forwards (the KL reference): FSDP2 shards it as well, so a
    rank holds 1/N of it, and frees each block after its forward; DDP leaves it whole (it has no
    gradients to synchronise)."""
    if kind == "ddp" and frozen:
        return model
    if kind == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = fsdp_mixed_precision(precision)
        reshard_after_forward = reshard_after_forward or frozen  # no backward would free them
        for module in list(model.modules()):
            if isinstance(module, torch.nn.ModuleList):
                for block in module:
                    fully_shard(block, mp_policy=policy, reshard_after_forward=reshard_after_forward)
        for name in getattr(model, "float32_modules", ()):  # e.g. the critic's value head
            fully_shard(model.get_submodule(name), mp_policy=MixedPrecisionPolicy())
        fully_shard(model, mp_policy=policy)
        return model
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    raise ValueError(f"unknown data parallelism {kind!r}; use fsdp2 or ddp")


def fsdp_mixed_precision(precision: str):
    """FSDP2's ``MixedPrecisionPolicy`` for ``train.precision``.

    bf16: each unit's float32 shards are cast to bfloat16 before the all-gather, so the gather
    moves half the bytes and the forward and backward compute on the gathered bf16 weights (no
    per-op cast of a float32 weight, as autocast does), and the gradients are reduce-scattered
    in float32 into the float32 shards AdamW steps: the master weights, gradients and optimizer
    state stay float32. This is torchtitan's and verl's recipe for FSDP2. Against one process's
    autocast (heron.trainer.precision) the activations between layers and the norms' weights
    are bfloat16 too: the values move within bf16 round-off, not by summation order only.
    A module named in the root's ``float32_modules`` gets a unit of its own that keeps float32
    (the critic's value head). fp32: no casts."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16":
        # cast_forward_inputs=False: FSDP2 would rebuild every forward keyword to cast the float tensors
        # in it, and the shared-prompt layout's attention plan travels as one (heron.trainer.grouped_attention);
        # nothing needs the cast: the root's inputs are token ids and masks, and each layer gets the bf16
        # hidden states and rotary tables of the gathered bf16 embedding
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    return MixedPrecisionPolicy()


def reshard(model: torch.nn.Module) -> None:
    """Frees FSDP2's gathered weights, leaving each unit its shard (no-op under DDP). A forward
    without a backward leaves the root unit gathered (FSDP2 keeps it for the backward that would
    reshard it): between operations a component holds only its shards, what a sleep offloads."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights with the plain model's names, on the host. A collective: every
    rank must call it; rank 0 gets the full dict, the others an empty one (torch keeps the host
    copy on rank 0 only)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=False))


def all_reduce_sum(value: float) -> float:
    """Sum of ``value`` over the ranks (float64, so counts stay exact)."""
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return float(tensor.item())


def all_reduce_mean(metrics: dict[str, float]) -> dict[str, float]:
    """Mean of each metric over the ranks; every rank passes the same keys in the same order."""
    keys = sorted(metrics)
    tensor = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    tensor /= dist.get_world_size()
    return dict(zip(keys, tensor.tolist()))


def max_over_ranks(count: int) -> int:
    """The largest ``count`` of any rank (e.g. micro-batches: under FSDP2 each forward is a
    collective, so every rank must run as many)."""
    tensor = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is set on any rank (so every rank takes the same branch)."""
    return all_reduce_sum(float(flag)) > 0


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Clips the global gradient norm over all ranks' shards; returns the norm before clipping."""
    from torch.distributed.tensor import DTensor

    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if isinstance(norm, DTensor):  # FSDP2: a DTensor holding partial sums
        norm = norm.full_tensor()
    return float(norm)
