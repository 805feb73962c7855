"""``RayExecutor``: engines and trainer ranks as ``ComponentHost`` actors on the bundles of one
placement group (see ``heron.cluster.placement`` for colocated vs disaggregated).

Start-up order: placement check (a local Ray's size is known from the config, so an
unplaceable request fails before Ray starts) -> Ray -> placement check against the running
cluster's resources -> placement group (deadline ``startup_timeout_s``) -> engine actors ->
trainer rank actors (rank 0 names the rendezvous address; all ranks join the gloo/nccl group
concurrently). Everything created is recorded so ``close`` can remove it, also after a
failure half-way through start-up. Actors receive only their specs, never the run's config.
"""

from __future__ import annotations

import atexit
import logging
import math
import time
from dataclasses import dataclass, replace

import ray
from ray.util.placement_group import remove_placement_group

from heron.cluster.actor_host import ComponentHost
from heron.cluster.engine_group import RemoteEngine
from heron.cluster.placement import actor_options, check_local_ray_placeable, check_placeable, plan_for, reserve
from heron.cluster.ray_session import start_ray
from heron.cluster.remote_call import ActorRef, wait_all
from heron.cluster.critic_group import CriticGroup, build_critic_rank
from heron.cluster.rank_spec import RankSpec
from heron.cluster.remote_residency import attach_actors, attach_remote_residency
from heron.cluster.trainer_group import TrainerGroup, build_trainer_rank
from heron.config.cluster import ClusterConfig
from heron.config.tracking import ProfileConfig
from heron.config.train import TrainConfig
from heron.critic.build import CriticSpec
from heron.parallel.rank_balance import RankBalance
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import ResidencySettings
from heron.rollout.registry import EngineSpec, build_engine
from heron.tracking.profiler import ProfileFiles
from heron.trainer.build import TrainerSpec
from heron.weights.transport import build_transport

log = logging.getLogger("heron.cluster")


@dataclass(frozen=True)
class RaySettings:
    """What the Ray executor needs: its cluster section, the trainer's data parallelism, the
    residency settings and the folder of the disk weight transport."""

    cluster: ClusterConfig
    train: TrainConfig
    colocate: bool
    residency: ResidencySettings
    weight_dir: str
    critic: bool = False
    """The run has a critic (``algo.advantage=gae``): its actor shares trainer rank 0's bundle."""

class RayExecutor:
    def __init__(self, settings: RaySettings):
        self.settings = settings
        self.cluster = settings.cluster
        self.actors: list[ActorRef] = []
        self.engines: list[ActorRef] = []
        self.engine_shutdown_s = 0.0  # how long an engine's close may take (a server's grace), from its spec
        self.group = None
        self.closed = False
        world, colocate = settings.train.world_size, settings.colocate
        if ray.is_initialized():  # Ray is already there: checked against its real resources below
            self.plan = plan_for(self.cluster, world, colocate, settings.critic)
        else:  # a local Ray's size is known from the config: fail before starting it
            self.plan = check_local_ray_placeable(self.cluster, world, colocate, settings.critic)
        self.started_ray = start_ray(self.cluster)
        atexit.register(self.close)
        try:
            where = f"the Ray cluster at {self.cluster.address}" if self.cluster.address else "the running Ray"
            check_placeable(self.plan, ray.cluster_resources(), where)
            self.group = reserve(self.plan, self.cluster.startup_timeout_s)
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

    def engine(self, spec: EngineSpec) -> RemoteEngine:
        engines = [self._spawn(f"engine-{e}", b) for e, b in enumerate(self.plan.engine_bundles)]
        self.engine_shutdown_s = spec.engine.shutdown_timeout_s
        deadline = self.cluster.startup_timeout_s + spec.engine.startup_timeout_s  # a server starts inside the actor
        self._build_all([(e, e.submit_host("build", build_engine, replace(spec, name=e.name))) for e in engines],
                        "build engine", deadline)
        self.engines = engines
        return RemoteEngine(engines, self.cluster.call_timeout_s)

    def trainer(self, spec: TrainerSpec) -> TrainerGroup:
        train = self.settings.train
        ranks = self._rank_actors("trainer", self.plan.trainer_bundles, build_trainer_rank, spec)
        if self.cluster.weight_transport == "broadcast":
            self._join_weight_group(ranks[0])
        transport = build_transport(self.cluster.weight_transport, self.settings.weight_dir, self.cluster.call_timeout_s)
        balance = RankBalance(ranks[0].get("skips_zero_advantage_rows"), train.balance_ranks, _rows_per_micro_batch(train))
        return TrainerGroup(ranks, train.steps_per_rollout, transport, self.cluster.call_timeout_s, balance)

    def critic(self, spec: CriticSpec, coordinator: Coordinator) -> CriticGroup:
        """The critic's rank actors, one on each trainer rank's bundle, built like the local critic
        and made data-parallel (``heron.cluster.critic_group``), with their residency attached inside
        and proxies registered with the run's coordinator (offloaded like the trainer)."""
        bundles = self.plan.critic_bundles
        ranks = self._rank_actors("critic", bundles, build_critic_rank, spec)
        train = self.settings.train
        balance = RankBalance(False, train.balance_ranks, _rows_per_micro_batch(train))  # every row has a value loss
        critic = CriticGroup(ranks, train.steps_per_rollout, self.cluster.call_timeout_s, balance)
        settings = self.settings.residency
        critic.residency = attach_actors(ranks, bundles, settings.offload_train, settings, coordinator,
                                         self.cluster.startup_timeout_s)
        return critic

    def _rank_actors(self, name: str, bundles: list[int], build, spec) -> list[ActorRef]:
        """``<name>-rank-<r>`` actors on ``bundles``, each building its rank of a data-parallel
        component (``build(RankSpec(spec, ...), rank, addr, port)``) in one group served by rank 0."""
        train = self.settings.train
        rank_spec = RankSpec(spec, train.world_size, train.parallel, self.cluster.device, self.cluster.collective_timeout_s)
        ranks = [self._spawn(f"{name}-rank-{r}", b) for r, b in enumerate(bundles)]
        addr, port = wait_all([(ranks[0], ranks[0].submit_host("rendezvous_address"))], "rendezvous", self.cluster.startup_timeout_s)[0]
        self._build_all(
            [(r, r.submit_host("build", build, rank_spec, i, addr, port)) for i, r in enumerate(ranks)], f"build {name} rank",
        )
        return ranks

    def residency(self, trainer: TrainerGroup, engine: RemoteEngine) -> Coordinator:
        """Attaches residency inside every actor and proxies on the driver; returns the
        coordinator that arbitrates each bundle when colocated (``heron.cluster.remote_residency``)."""
        return attach_remote_residency(trainer, engine, self.plan, self.settings.residency, self.cluster.startup_timeout_s)

    def _join_weight_group(self, sender: ActorRef) -> None:
        """Trainer rank 0 (rank 0) and the engines (1..E) form the broadcast group. Needs the
        engines: ``engine()`` runs before ``trainer()``."""
        size, timeout_s, bucket_bytes = len(self.engines) + 1, self.cluster.collective_timeout_s, self.cluster.weight_bucket_mb << 20
        addr, port = wait_all([(sender, sender.submit_host("rendezvous_address"))], "rendezvous", self.cluster.startup_timeout_s)[0]
        joins = [(sender, sender.submit_host("join_weight_group", addr, port, 0, size, timeout_s, bucket_bytes))]
        joins += [(e, e.submit("join_weight_group", addr, port, i, size, timeout_s, bucket_bytes))
                  for i, e in enumerate(self.engines, start=1)]  # the engine's own (a server's worker may join)
        self._build_all(joins, "join weight group")

    def start_profiles(self, cfg: ProfileConfig) -> None:
        """Every actor starts its own torch.profiler (``ComponentHost.start_profile``)."""
        wait_all([(a, a.submit_host("start_profile", cfg)) for a in self.actors], "start_profile", self.cluster.call_timeout_s)

    def stop_profiles(self) -> dict[str, ProfileFiles]:
        """Each actor's profile, by actor name, sent back through Ray."""
        files = wait_all([(a, a.submit_host("stop_profile")) for a in self.actors], "stop_profile", self.cluster.call_timeout_s)
        return {a.name: f for a, f in zip(self.actors, files) if f is not None}

    def _close_engines(self) -> None:
        """Lets each engine stop what it owns outside its actor (a vLLM server) before the actor
        is killed. A dead or hung actor is skipped: the server's guardian stops it when the
        actor's process is gone (heron/rollout/server/process.py)."""
        timeout = self.engine_shutdown_s + 10
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
        for actor in self.actors:
            _wait_gone(actor, KILL_WAIT_S)
        if self.group is not None:
            remove_placement_group(self.group)
        if self.started_ray:
            ray.shutdown()


KILL_WAIT_S = 60.0  # only a hung raylet takes this long; a kill lands in milliseconds


def _wait_gone(actor: ActorRef, timeout_s: float) -> None:
    """Returns once ``actor`` answers no more calls (or after ``timeout_s``, with a warning).
    ``ray.kill`` only sends the kill: until it lands the actor still runs calls, so without this a
    run could return while its actors live on (measured: under load a call right after close()
    still answered)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.handle.__ray_ready__.remote(), timeout=max(0.1, deadline - time.monotonic()))
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:  # the deadline decides
            continue
        time.sleep(0.05)
    log.warning("%s: still answering %.0f s after ray.kill", actor.name, timeout_s)


def _rows_per_micro_batch(train: TrainConfig) -> int:
    """``RankBalance.micro_batch_size``: the rows of a micro-batch, or 0 where a token budget packs them."""
    return 0 if train.max_tokens_per_micro_batch > 0 else train.micro_batch_size
