"""``RayExecutor``: engines and trainer ranks as ``ComponentHost`` actors on the bundles of one
placement group (see ``heron.cluster.placement`` for colocated vs disaggregated).

Start-up order: Ray -> placement group (deadline ``startup_timeout_s``) -> engine actors ->
trainer rank actors (rank 0 names the rendezvous address; all ranks join the gloo/nccl group
concurrently). Everything created is recorded so ``close`` can remove it, also after a
failure half-way through start-up.
"""

from __future__ import annotations

import atexit
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from ray.util.placement_group import remove_placement_group

from heron.cluster.actor_host import ComponentHost
from heron.cluster.engine_group import RemoteEngine
from heron.cluster.placement import PlacementPlan, actor_options, reserve
from heron.cluster.ray_session import start_ray
from heron.cluster.remote_call import ActorRef, wait_all
from heron.cluster.trainer_group import TrainerGroup, build_trainer_rank
from heron.process_signals import exit_on_sigterm

if TYPE_CHECKING:
    from heron.config.root import HeronConfig

log = logging.getLogger("heron.cluster")


class RayExecutor:
    def __init__(self, cfg: "HeronConfig"):
        self.cfg = cfg
        self.cluster = cfg.cluster
        self.actors: list[ActorRef] = []
        self.engines: list[ActorRef] = []
        self.group = None
        self.closed = False
        if cfg.checkpoint.enabled and cfg.checkpoint.async_:
            log.warning("checkpoint.async does not apply on cluster.backend=ray: trainer ranks write their shards synchronously")
        self.started_ray = start_ray(cfg.cluster)
        atexit.register(self.close)
        exit_on_sigterm()
        self.plan = PlacementPlan.build(
            cfg.train.world_size, cfg.cluster.num_engines, cfg.colocate, cfg.cluster.cpus_per_bundle, cfg.cluster.device
        )
        try:
            self.group = reserve(self.plan, cfg.cluster.startup_timeout_s)
        except BaseException:
            self.close()
            raise

    def _spawn(self, name: str, bundle: int) -> ActorRef:
        options = actor_options(self.plan, self.group, bundle)
        threads = max(1, math.floor(options["num_cpus"]))
        ref = ActorRef(ComponentHost.options(**options).remote(name, threads), name, self.cluster.call_timeout_s)
        self.actors.append(ref)
        return ref

    def _build_all(self, pending, what: str, timeout_s: float | None = None) -> None:
        wait_all(pending, what, timeout_s or self.cluster.startup_timeout_s)

    def engine(self, pad_token_id: int) -> RemoteEngine:
        from heron.components import build_engine

        engines = [self._spawn(f"engine-{e}", b) for e, b in enumerate(self.plan.engine_bundles)]
        deadline = self.cluster.startup_timeout_s + (self.cfg.engine.vllm.startup_timeout_s if self.cfg.engine.kind == "vllm" else 0)
        self._build_all([(e, e.submit_host("build", build_engine, self.cfg, pad_token_id, e.name)) for e in engines],
                        "build engine", deadline)  # a vLLM engine starts its server inside the actor
        self.engines = engines
        return RemoteEngine(engines, self.cluster.call_timeout_s)

    def trainer(self, policy_loss=None) -> TrainerGroup:
        """``policy_loss`` is not shipped: each rank re-loads the hooks from the config (user
        code referenced by file path does not pickle by reference)."""
        world = self.cfg.train.world_size
        ranks = [self._spawn(f"trainer-rank-{r}", b) for r, b in enumerate(self.plan.trainer_bundles)]
        addr, port = wait_all([(ranks[0], ranks[0].submit_host("rendezvous_address"))], "rendezvous", self.cluster.startup_timeout_s)[0]
        self._build_all(
            [(r, r.submit_host("build", build_trainer_rank, self.cfg, i, world, addr, port)) for i, r in enumerate(ranks)],
            "build trainer rank",
        )
        if self.cluster.weight_transport == "broadcast":
            self._join_weight_group(ranks[0])
        weight_dir = self.cluster.weight_dir or str(Path(self.cfg.run.dir).resolve() / "weights")
        return TrainerGroup(ranks, self.cfg, weight_dir)

    def residency(self, trainer: TrainerGroup, engine: RemoteEngine):
        """Attaches residency inside every actor and proxies on the driver; returns the
        coordinator that arbitrates each bundle when colocated (``heron.cluster.remote_residency``)."""
        from heron.cluster.remote_residency import attach_remote_residency

        return attach_remote_residency(trainer, engine, self.plan, self.cfg)

    def _join_weight_group(self, sender: ActorRef) -> None:
        """Trainer rank 0 (rank 0) and the engines (1..E) form the broadcast group. Needs the
        engines: ``engine()`` runs before ``trainer()``."""
        members = [sender, *self.engines]
        addr, port = wait_all([(sender, sender.submit_host("rendezvous_address"))], "rendezvous", self.cluster.startup_timeout_s)[0]
        self._build_all(
            [(m, m.submit_host("join_weight_group", addr, port, i, len(members), self.cluster.collective_timeout_s))
             for i, m in enumerate(members)],
            "join weight group",
        )

    def _close_engines(self) -> None:
        """Lets each engine stop what it owns outside its actor (a vLLM server) before the actor
        is killed. A dead or hung actor is skipped: the server's guardian stops it when the
        actor's process is gone (heron/rollout/server/process.py)."""
        timeout = self.cfg.engine.vllm.shutdown_timeout_s + 10
        pending = [(engine, engine.handle.close.remote()) for engine in self.engines]  # concurrently
        for engine, ref in pending:
            try:
                ray.get(ref, timeout=timeout)
            except Exception as error:  # dead or hung: nothing more to do from here
                log.warning("%s: close failed (%s); its server's guardian stops it", engine.name, type(error).__name__)

    def close(self) -> None:
        """Kills this run's actors, removes its placement group, stops Ray if it started it."""
        if self.closed:
            return
        self.closed = True
        if not ray.is_initialized():
            return
        self._close_engines()
        for actor in self.actors:
            try:
                ray.kill(actor.handle, no_restart=True)
            except Exception:  # already dead: nothing to stop
                pass
        if self.group is not None:
            remove_placement_group(self.group)
        if self.started_ray:
            ray.shutdown()
