"""Where a run's components execute: in this process (``local``) or as Ray actors (``ray``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class ClusterConfig:
    """Executor, placement and deadlines. ``local`` runs everything in one process (the
    default); ``ray`` starts (or joins, via ``address``) a Ray cluster, reserves one placement
    bundle per device and runs trainer ranks and rollout engines as actors on those bundles."""

    backend: Literal["local", "ray"] = doc("Executor: local (one process) or ray (actors in a placement group).", "local")
    address: str = doc("Ray cluster to join (e.g. 'ray://head:10001' or 'auto'); empty starts a local Ray.", "")
    num_cpus: int = doc("CPUs of the local Ray started when address is empty (keep small on shared machines).", 2)
    num_engines: int = doc("Rollout engine actors (ray backend); requests are split evenly across them.", 1)
    device: Literal["cpu", "cuda"] = doc(
        "Device kind of each bundle: cpu (gloo) or cuda (one GPU per bundle, shared as fractional GPUs by "
        "colocated actors; nccl for the trainer group and the weight broadcast).", "cpu"
    )
    cpus_per_bundle: float = doc(
        "CPUs reserved by each placement bundle (one bundle per device); 0 = automatic: a local Ray's "
        "num_cpus split evenly over the bundles, 1 per bundle on a joined cluster.",
        0.0,
    )
    weight_transport: Literal["object_store", "disk", "broadcast"] = doc(
        "Weight push: numpy arrays through Ray's object store, a safetensors folder on disk, or a "
        "torch.distributed broadcast from trainer rank 0 to the engines.",
        "object_store",
    )
    weight_dir: str = doc("Folder for weight_transport=disk (shared by all nodes); empty = <run.dir>/weights.", "")
    weight_bucket_mb: int = doc(
        "weight_transport=broadcast: most MB of weights in one send; trainer rank 0 holds one bucket's copy at a "
        "time (host and device), not the whole model's (a larger tensor goes alone).", 512,
    )
    call_timeout_s: float = doc("Deadline of every remote call (generate, train, weight push), in seconds.", 600.0)
    collective_timeout_s: float = doc("Deadline of every torch.distributed collective, in seconds.", 300.0)
    startup_timeout_s: float = doc("Deadline for Ray start, placement group reservation and actor start, in seconds.", 120.0)

    def __post_init__(self):
        check(self.num_cpus >= 1, f"cluster.num_cpus must be >= 1, got {self.num_cpus}")
        check(self.num_engines >= 1, f"cluster.num_engines must be >= 1, got {self.num_engines}")
        check(self.weight_bucket_mb >= 1, f"cluster.weight_bucket_mb must be >= 1, got {self.weight_bucket_mb}")
        check(self.cpus_per_bundle >= 0, f"cluster.cpus_per_bundle must be >= 0 (0 = automatic), got {self.cpus_per_bundle}")
        for key in ("call_timeout_s", "collective_timeout_s", "startup_timeout_s"):
            value = getattr(self, key)
            check(value > 0, f"cluster.{key} must be > 0 seconds, got {value}")
