"""Placement pre-flight (``heron.cluster.placement``), pure: the automatic bundle size makes
the default request fit the default local Ray, and a request larger than the cluster fails
with one line naming the numbers and the fix, before anything is reserved."""

from __future__ import annotations

import pytest

from heron.cluster.placement import (
    PlacementError, PlacementPlan, check_local_ray_placeable, check_placeable, local_resources, plan_for,
)
from heron.config.cluster import ClusterConfig
from heron.errors import UserError


def test_default_ray_request_fits_the_default_local_ray():
    # backend=ray, train.world_size=2, 1 engine, disaggregated: 3 bundles on num_cpus=2
    cluster = ClusterConfig(backend="ray")
    plan = plan_for(cluster, world_size=2, colocate=False)
    assert plan.num_bundles == 3
    assert plan.cpus_per_bundle == 0.6666  # floor(2 / 3) to Ray's unit of 1e-4: 3 x 0.6666 = 1.9998 <= 2
    check_placeable(plan, local_resources(cluster), "a local Ray")
    colocated = plan_for(cluster, world_size=2, colocate=True)
    assert (colocated.num_bundles, colocated.cpus_per_bundle) == (2, 1.0)


def test_explicit_bundle_size_and_joined_cluster_are_kept():
    assert plan_for(ClusterConfig(backend="ray", cpus_per_bundle=0.5), 2, False).cpus_per_bundle == 0.5
    assert plan_for(ClusterConfig(backend="ray", address="auto"), 2, False).cpus_per_bundle == 1.0


def test_request_over_the_cluster_names_the_numbers_and_the_fix():
    plan = plan_for(ClusterConfig(backend="ray", cpus_per_bundle=1.0), world_size=2, colocate=False)
    with pytest.raises(PlacementError) as error:
        check_placeable(plan, {"CPU": 2.0}, "a local Ray of cluster.num_cpus=2")
    message = str(error.value)
    assert message.startswith(
        "cannot place 3 bundles x {'CPU': 1.0} on a local Ray of cluster.num_cpus=2: 3 CPU needed, 2 available; "
    )
    assert "cluster.cpus_per_bundle" in message and "colocate=true" in message and "\n" not in message
    assert isinstance(error.value, UserError)  # the CLI prints it as one line, exit 2


def test_missing_gpus_are_named():
    plan = PlacementPlan.build(world_size=2, num_engines=1, colocate=True, cpus_per_bundle=1.0, device="cuda")
    with pytest.raises(PlacementError, match=r"cluster.device=cuda but the Ray cluster at auto has no GPUs \(2 needed"):
        check_placeable(plan, {"CPU": 8.0}, "the Ray cluster at auto")
    with pytest.raises(PlacementError, match=r"2 GPU needed, 1 available"):
        check_placeable(plan, {"CPU": 8.0, "GPU": 1.0}, "the Ray cluster at auto")
    check_placeable(plan, {"CPU": 2.0, "GPU": 2.0}, "the Ray cluster at auto")  # exactly enough fits


def test_local_ray_preflight_uses_the_config_alone():
    # what `heron check` and RayExecutor call before any Ray exists
    assert check_local_ray_placeable(ClusterConfig(backend="ray"), 2, False).num_bundles == 3
    with pytest.raises(PlacementError, match=r"on a local Ray of cluster.num_cpus=2: 8 CPU needed, 2 available"):
        check_local_ray_placeable(ClusterConfig(backend="ray", cpus_per_bundle=4.0), 1, False)
    joined = ClusterConfig(backend="ray", address="auto", cpus_per_bundle=4.0)
    assert check_local_ray_placeable(joined, 1, False).cpus_per_bundle == 4.0  # checked after connecting instead
