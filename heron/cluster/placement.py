"""Placement: one bundle per device, and which actor sits on which bundle.

Colocated (``colocate: true``): ``world_size`` bundles; trainer rank r sits on bundle r and
engine e shares bundle ``e % world_size`` with a trainer rank (residency arbitrates the
device). Disaggregated: ``world_size + num_engines`` bundles, engines on their own. Actors
sharing a bundle split its resources evenly, so the group always fits the reservation.

A placement group larger than the cluster waits forever in Ray: the reservation here is
always waited with a deadline and fails with the sizes involved.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from heron.cluster.errors import ClusterError


@dataclass(frozen=True)
class PlacementPlan:
    num_bundles: int
    trainer_bundles: list[int]  # rank -> bundle index
    engine_bundles: list[int]  # engine -> bundle index
    cpus_per_bundle: float
    gpus_per_bundle: int  # 0 on CPU, 1 on CUDA

    @classmethod
    def build(cls, world_size: int, num_engines: int, colocate: bool, cpus_per_bundle: float, device: str) -> "PlacementPlan":
        trainer = list(range(world_size))
        engines = [e % world_size for e in range(num_engines)] if colocate else [world_size + e for e in range(num_engines)]
        num_bundles = world_size if colocate else world_size + num_engines
        return cls(num_bundles, trainer, engines, cpus_per_bundle, 1 if device == "cuda" else 0)

    def bundles(self) -> list[dict[str, float]]:
        bundle = {"CPU": self.cpus_per_bundle}
        if self.gpus_per_bundle:
            bundle["GPU"] = float(self.gpus_per_bundle)
        return [dict(bundle) for _ in range(self.num_bundles)]

    def share(self, bundle: int) -> float:
        """Fraction of a bundle each of its actors reserves."""
        return 1.0 / (self.trainer_bundles + self.engine_bundles).count(bundle)


def reserve(plan: PlacementPlan, timeout_s: float):
    """Creates the placement group and waits at most ``timeout_s`` for all bundles."""
    group = placement_group(plan.bundles(), strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise ClusterError(
            f"placement group of {plan.num_bundles} bundles x {plan.bundles()[0]} was not ready within {timeout_s:g}s; "
            f"the cluster has {ray.cluster_resources()}: lower train.world_size / cluster.num_engines / "
            f"cluster.cpus_per_bundle, set colocate=true, or add nodes"
        )
    return group


def actor_options(plan: PlacementPlan, group, bundle: int) -> dict:
    share = plan.share(bundle)
    options = {
        "num_cpus": plan.cpus_per_bundle * share,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle),
    }
    if plan.gpus_per_bundle:
        options["num_gpus"] = plan.gpus_per_bundle * share
    return options
