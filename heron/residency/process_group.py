"""A process group a component owns, released on sleep and recreated on wake.

NCCL communicators hold device buffers (hundreds of MB on large jobs), so a colocated
component must give them back while asleep. ``dist.new_group`` is collective over the default
group: every rank must sleep and wake its components in the same order (true in SPMD code,
where every rank runs the same loop). On CPU the groups are gloo groups, destroyed and
recreated for real.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from heron.parallel.data_parallel import group_timeout
from heron.residency.errors import ResidencyError


class ManagedProcessGroup:
    """``dist.new_group(ranks, backend)`` that can be released and recreated; ``group`` is
    the live group (raises while released). Its collectives' deadline: ``timeout_s``, else the
    trainer group's (``cluster.collective_timeout_s``)."""

    def __init__(self, component: str, name: str, ranks: list[int] | None = None,
                 backend: str | None = None, timeout_s: float | None = None):
        if not dist.is_initialized():
            raise ResidencyError(f"{component}: process group '{name}' needs torch.distributed initialised")
        self.component = component
        self.name = name
        self.ranks = ranks
        self.backend = backend
        self.timeout = group_timeout() if timeout_s is None else timedelta(seconds=timeout_s)
        self._group = self._create()

    def _create(self):
        return dist.new_group(self.ranks, backend=self.backend, timeout=self.timeout)

    @property
    def group(self):
        if self._group is None:
            raise ResidencyError(
                f"{self.component} is asleep: its process group '{self.name}' is released; use it only "
                f"inside a @needs_device operation"
            )
        return self._group

    @property
    def released(self) -> bool:
        return self._group is None

    def release(self) -> None:
        if self._group is not None:
            dist.destroy_process_group(self._group)
            self._group = None

    def restore(self) -> None:
        if self._group is None:
            self._group = self._create()
