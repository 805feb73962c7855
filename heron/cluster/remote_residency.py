"""Residency across Ray actors: the driver's side of colocated sleep/wake.

Each actor (engine, trainer rank) has its own ``Residency`` attached to its component inside
the actor (``heron.cluster.actor_residency``): its own state machine and memory backend, per
``offload.train`` / ``offload.rollout``. On the driver, every actor is represented by a proxy
(``actor_proxy``): the same ``Residency`` state machine, whose backend is the actor itself
(release = a remote ``sleep``, restore = a remote ``wake``, held bytes = a remote
``memory_report``), on device key ``bundle-<index>``. The unchanged ``Coordinator`` registers
these proxies, so waking an actor first puts the other actors on its bundle to sleep, with
remote calls under ``cluster.call_timeout_s``.

The stand-ins (``RemoteEngine``, ``TrainerGroup``) hold a ``ResidencySet`` of their actors'
proxies and declare their operations like local components (``@needs_device`` /
``@host_only``): entering an operation's scope wakes each of their actors in turn (the
coordinator sleeps what shares its bundle first), and leaving it restores the previous state
(asleep when offloaded). The loop never calls sleep/wake.

A dead or hung actor during a remote sleep/wake raises the ``ClusterError`` naming it (the
proxy is then ``failed``), within the call deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from functools import partial
from typing import TYPE_CHECKING

from heron.cluster.remote_call import ActorRef, wait_all
from heron.residency.coordinator import Coordinator
from heron.residency.errors import ResidencyError
from heron.residency.state import Holdings, Residency, State
from heron.residency.wiring import ResidencySettings

if TYPE_CHECKING:
    from heron.cluster.placement import PlacementPlan


def bundle_key(bundle: int) -> str:
    """The coordinator's device key of a placement bundle (one bundle = one device)."""
    return f"bundle-{bundle}"


class ActorMemory:
    """The memory backend of a driver-side proxy: the actor's own residency, by remote calls
    (release = a remote ``sleep``, restore = a remote ``wake``). A dead or hung actor raises the
    ``ClusterError`` naming it; the proxy's state machine re-raises it as is (a ComponentError)."""

    def __init__(self, actor: ActorRef, offload: bool):
        self.actor = actor
        self.keeps_memory = not offload

    def _call(self, method: str):
        return wait_all([(self.actor, self.actor.submit_host(method))], f"{method} (residency)", self.actor.timeout_s)[0]

    def release(self, inventory) -> dict[str, int]:
        """Remote sleep; returns the bytes per category the actor's sleep released."""
        state, released = self._call("sleep")
        if state != State.ASLEEP.value:
            raise ResidencyError(f"{self.actor.name}: remote sleep left it {state}, expected asleep")
        return released

    def restore(self) -> None:
        state = self._call("wake")
        if state != State.AWAKE.value:
            raise ResidencyError(f"{self.actor.name}: remote wake left it {state}, expected awake")

    def held_bytes(self, inventory) -> dict[str, int]:
        return self._call("memory_report")

    def allocation_scope(self):
        return nullcontext()


def actor_proxy(actor: ActorRef, bundle: int, offload: bool, remote_state: str, wait_timeout_s: float) -> Residency:
    """Driver-side proxy of one actor's residency: the ordinary state machine over an
    ``ActorMemory`` backend (the actor holds the tensors, so the proxy declares none), on device
    key ``bundle-<index>``, starting in the actor's own state (asleep when offloaded)."""
    return Residency(actor.name, Holdings(), ActorMemory(actor, offload), device=bundle_key(bundle),
                     wait_timeout_s=wait_timeout_s, state=State(remote_state))


class ResidencySet:
    """The residencies of a stand-in's actors, entered together. Each actor sits on its own
    bundle, so their resident scopes are entered (and left) concurrently, one thread per
    actor: N ranks wake in the time of one, each after the coordinator slept what shares its
    bundle. If a member's entry fails, the others are left again and its error is raised."""

    def __init__(self, members: list[Residency]):
        self.members = members
        self.name = "+".join(m.name for m in members)

    @property
    def state(self) -> State:
        """The members' common state; with mixed states: FAILED if any failed, else AWAKE if
        any is not asleep (holds device memory)."""
        states = {m.state for m in self.members}
        if len(states) == 1:
            return states.pop()
        return State.FAILED if State.FAILED in states else State.AWAKE

    @contextmanager
    def resident(self, operation: str) -> Iterator[None]:
        with self._all([m.resident(operation) for m in self.members]):
            yield

    @contextmanager
    def host_only(self, operation: str) -> Iterator[None]:
        with ExitStack() as stack:  # no transitions: nothing to overlap
            for member in self.members:
                stack.enter_context(member.host_only(operation))
            yield

    @staticmethod
    @contextmanager
    def _all(scopes: list[AbstractContextManager]) -> Iterator[None]:
        if len(scopes) == 1:
            with scopes[0]:
                yield
            return
        entered = _concurrently([s.__enter__ for s in scopes])
        done = [s for s, error in zip(scopes, entered) if error is None]
        failed = next((e for e in entered if e is not None), None)
        if failed is not None:
            _concurrently([partial(s.__exit__, None, None, None) for s in done])
            raise failed
        exc_info = (None, None, None)
        try:
            yield
        except BaseException as error:
            exc_info = (type(error), error, error.__traceback__)
            raise
        finally:
            left = _concurrently([partial(s.__exit__, *exc_info) for s in done])
            if exc_info[0] is None:
                first = next((e for e in left if e is not None), None)
                if first is not None:
                    raise first

    def sleep(self) -> None:
        for member in self.members:
            member.sleep()

    def wake(self) -> None:
        for member in self.members:
            member.wake()

    def memory_report(self) -> dict[str, int]:
        """Device bytes per category, summed over the actors."""
        total: dict[str, int] = {}
        for member in self.members:
            for category, num_bytes in member.memory_report().items():
                total[category] = total.get(category, 0) + num_bytes
        return total


def _concurrently(calls: list) -> list[BaseException | None]:
    """Runs the calls in one thread each; returns each one's exception (None on success)."""
    with ThreadPoolExecutor(max_workers=len(calls) or 1) as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.exception() for f in futures]


def attach_actors(actors: list[ActorRef], bundles: list[int], offload: bool, settings: ResidencySettings,
            coordinator: Coordinator, timeout_s: float) -> ResidencySet:
    """Attaches residency inside every actor (concurrently), then registers their proxies."""
    wait_s = settings.wait_timeout_s
    states = wait_all([(a, a.submit_host("attach_residency", offload, wait_s)) for a in actors], "attach residency", timeout_s)
    members = [actor_proxy(a, b, offload, s, wait_s) for a, b, s in zip(actors, bundles, states)]
    for member in members:
        coordinator.register(member)
    return ResidencySet(members)


def attach_remote_residency(trainer, engine, plan: "PlacementPlan", settings: ResidencySettings,
                            timeout_s: float) -> Coordinator:
    """Gives every trainer rank and engine actor its residency and the stand-ins their sets;
    returns the coordinator (arbitration by bundle when colocated; memory metrics always)."""
    coordinator = Coordinator(settings.colocate)
    trainer.residency = attach_actors(trainer.ranks, plan.trainer_bundles, settings.offload_train, settings, coordinator, timeout_s)
    engine.residency = attach_actors(engine.engines, plan.engine_bundles, settings.offload_rollout, settings, coordinator, timeout_s)
    return coordinator
