"""``RankSpec``: what one rank actor of a data-parallel component (a trainer rank, a critic rank)
needs -- the component's own spec plus its data parallelism -- and ``join_group``, the first thing
such an actor does: join its component's torch.distributed group; ``rank_parallelize``: how it
then makes its model data-parallel. ``wait_saved_on_ranks``: the driver-side end of such a
component's checkpoint write."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from heron.cluster.remote_call import wait_all

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RankSpec:
    component: Any  # TrainerSpec | CriticSpec: built by the same function as in one process
    world_size: int
    parallel: str  # train.parallel: fsdp2 | ddp
    device: str  # cluster.device: cpu (gloo) | cuda (nccl)
    collective_timeout_s: float


def rank_parallelize(spec: RankSpec) -> Callable[..., torch.nn.Module]:
    """``parallelize(model, frozen=False) -> model`` for a rank's component: ``train.parallel``
    under the component's ``train.precision`` (FSDP2 gathers in bf16 under bf16) and
    ``train.reshard_after_forward`` (heron.parallel.data_parallel)."""
    from heron.parallel.data_parallel import apply_data_parallel

    train = spec.component.train
    return partial(apply_data_parallel, kind=spec.parallel, precision=train.precision,
                   reshard_after_forward=train.reshard_after_forward)


def join_group(spec: RankSpec, rank: int, master_addr: str, master_port: int) -> None:
    """Joins the component's process group (rank 0 serves its store at ``master_addr:master_port``)."""
    from heron.cluster.rendezvous import make_store
    from heron.parallel.data_parallel import init_process_group

    store = make_store(master_addr, master_port, rank, spec.world_size, spec.collective_timeout_s)
    init_process_group(rank, spec.world_size, store, device=spec.device, timeout_s=spec.collective_timeout_s)


def wait_saved_on_ranks(ranks: list, timeout_s: float) -> dict[str, str]:
    """Every rank actor's checksums once its shard write has finished (async saves write from host
    copies: no rank wakes), merged into one {path: checksum}."""
    sums = wait_all([(r, r.submit_host("wait_saved")) for r in ranks], "wait_saved", timeout_s)
    return {path: digest for rank_sums in sums for path, digest in rank_sums.items()}
