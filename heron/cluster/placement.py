"""Placement: one bundle per device, and which actor sits on which bundle.

Colocated (``colocate: true``): ``world_size`` bundles; trainer rank r sits on bundle r and
engine e shares bundle ``e % world_size`` with a trainer rank (residency arbitrates the
device). Disaggregated: ``world_size + num_engines`` bundles, engines on their own. Actors
sharing a bundle split its resources evenly, so the group always fits the reservation.

Bundle size: ``cluster.cpus_per_bundle``, or with 0 (the default) the local Ray's
``num_cpus`` split evenly over the bundles (1 CPU per bundle on a joined cluster), so the
default plan always fits the default local Ray.

A placement group larger than the cluster waits forever in Ray. ``check_placeable``
compares the plan with the cluster's total resources before anything waits (for a local Ray
from the config, before Ray starts; for a joined cluster right after connecting); the
reservation itself is still waited with a deadline (resources taken by others, bundles that
fit no single node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping

from heron.cluster.errors import ClusterError
from heron.errors import UserError

if TYPE_CHECKING:
    from heron.config.cluster import ClusterConfig

RESOURCE_UNIT = 1e-4  # Ray's resource granularity: requests are rounded to 4 decimals


class PlacementError(ClusterError, UserError):
    """The request exceeds what the cluster has: known before anything is reserved."""


@dataclass(frozen=True)
class PlacementPlan:
    num_bundles: int
    trainer_bundles: list[int]  # rank -> bundle index
    engine_bundles: list[int]  # engine -> bundle index
    cpus_per_bundle: float
    gpus_per_bundle: int  # 0 on CPU, 1 on CUDA
    critic_bundles: list[int] = field(default_factory=list)  # critic rank -> bundle (algo.advantage=gae): the trainer ranks'

    @classmethod
    def build(cls, world_size: int, num_engines: int, colocate: bool, cpus_per_bundle: float, device: str,
              critic: bool = False) -> "PlacementPlan":
        trainer = list(range(world_size))
        engines = [e % world_size for e in range(num_engines)] if colocate else [world_size + e for e in range(num_engines)]
        num_bundles = world_size if colocate else world_size + num_engines
        from heron.device import gpus_per_bundle

        return cls(num_bundles, trainer, engines, cpus_per_bundle, gpus_per_bundle(device), list(trainer) if critic else [])

    def total(self) -> dict[str, float]:
        """Resources of the whole placement group, per kind."""
        total = {"CPU": self.cpus_per_bundle * self.num_bundles}
        if self.gpus_per_bundle:
            total["GPU"] = float(self.gpus_per_bundle * self.num_bundles)
        return total

    def bundles(self) -> list[dict[str, float]]:
        bundle = {"CPU": self.cpus_per_bundle}
        if self.gpus_per_bundle:
            bundle["GPU"] = float(self.gpus_per_bundle)
        return [dict(bundle) for _ in range(self.num_bundles)]

    def share(self, bundle: int) -> float:
        """Fraction of a bundle each of its actors reserves."""
        return 1.0 / (self.trainer_bundles + self.engine_bundles + self.critic_bundles).count(bundle)


def plan_for(cfg: "ClusterConfig", world_size: int, colocate: bool, critic: bool = False) -> PlacementPlan:
    """The run's plan; ``cpus_per_bundle=0`` resolves to ``bundle_cpus``."""
    plan = PlacementPlan.build(world_size, cfg.num_engines, colocate, cfg.cpus_per_bundle, cfg.device, critic)
    if cfg.cpus_per_bundle == 0:
        plan = replace(plan, cpus_per_bundle=bundle_cpus(cfg, plan.num_bundles))
    return plan


def bundle_cpus(cfg: "ClusterConfig", num_bundles: int) -> float:
    """Automatic bundle size: a local Ray's ``num_cpus`` split evenly over the bundles, rounded
    down to Ray's unit so that the bundles' sum never exceeds it (2 CPUs, 3 bundles -> 0.6666
    each); 1 CPU per bundle on a joined cluster (its size is unknown before connecting)."""
    if cfg.address:
        return 1.0
    return _round_down(cfg.num_cpus / num_bundles)


def local_resources(cfg: "ClusterConfig") -> dict[str, float]:
    """Total resources of the local Ray heron starts (``cluster.address`` empty): its CPUs, and
    with ``cluster.device=cuda`` the GPUs Ray will detect on this machine."""
    if cfg.device == "cpu":
        return {"CPU": float(cfg.num_cpus)}
    from heron.device import local_gpu_count

    return {"CPU": float(cfg.num_cpus), "GPU": float(local_gpu_count())}


def check_placeable(plan: PlacementPlan, resources: Mapping[str, float], where: str) -> None:
    """Raises ``PlacementError`` (one line: the numbers and the fix) when the plan's total
    exceeds the cluster's ``resources`` (``ray.cluster_resources()``, or ``local_resources``);
    ``where`` names the cluster in the message. Pure: no Ray needed."""
    short = {kind: (need, resources.get(kind, 0.0)) for kind, need in plan.total().items()
             if need > resources.get(kind, 0.0) + RESOURCE_UNIT / 2}
    if not short:
        return
    if "GPU" in short and short["GPU"][1] == 0:
        raise PlacementError(
            f"cluster.device=cuda but {where} has no GPUs ({short['GPU'][0]:g} needed: one per placement bundle); "
            f"use cluster.device=cpu, or join a Ray cluster with GPUs (cluster.address)"
        )
    needs = ", ".join(f"{need:g} {kind} needed, {have:g} available" for kind, (need, have) in short.items())
    raise PlacementError(
        f"cannot place {plan.num_bundles} bundles x {plan.bundles()[0]} on {where}: {needs}; "
        f"lower cluster.cpus_per_bundle (0 = split the local Ray's CPUs evenly), train.world_size or "
        f"cluster.num_engines, set colocate=true (fewer bundles), or give the cluster more "
        f"(cluster.num_cpus for a local Ray)"
    )


def check_local_ray_placeable(cfg: "ClusterConfig", world_size: int, colocate: bool,
                              critic: bool = False) -> PlacementPlan:
    """The pre-flight of a run on a local Ray (``cluster.address`` empty): its plan, checked
    against the Ray heron would start -- no Ray needed (``heron check`` and ``RayExecutor``)."""
    plan = plan_for(cfg, world_size, colocate, critic)
    if not cfg.address:
        check_placeable(plan, local_resources(cfg), f"a local Ray of cluster.num_cpus={cfg.num_cpus}")
    return plan


def reserve(plan: PlacementPlan, timeout_s: float):
    """Creates the placement group and waits at most ``timeout_s`` for all bundles."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

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
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    share = plan.share(bundle)
    options = {
        "num_cpus": _round_down(plan.cpus_per_bundle * share),
        "scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle),
    }
    if plan.gpus_per_bundle:
        options["num_gpus"] = plan.gpus_per_bundle * share
    return options


def _round_down(amount: float) -> float:
    """To Ray's unit, so actors sharing a bundle never ask for more than it holds."""
    return round(math.floor(amount / RESOURCE_UNIT + 1e-6) * RESOURCE_UNIT, 4)
