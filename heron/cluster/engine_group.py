"""``RemoteEngine``: the driver's stand-in for one or more engine actors. It keeps the
``RolloutEngine`` contract, so the generator, evaluator and loop use it like a local engine.

Requests are split into contiguous, near-equal chunks, one per engine, generated
concurrently and returned in request order (outputs do not depend on batching, see
``heron.rollout.engine``). A weight push is put into the object store once and loaded by
every engine; each then reports the version it serves.

Operations are declared like the local engine's (``@needs_device`` wakes the engine actors
through their residency proxies, sleeping colocated trainer ranks first; see
``heron.cluster.remote_residency``); ``residency`` is attached by the executor.
"""

from __future__ import annotations

from heron.cluster.remote_call import ActorRef, wait_all
from heron.records import Generation, GenerationRequest
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.weights.handle import WeightHandle
from heron.weights.version import WeightVersionError


class RemoteEngine(Resident):
    def __init__(self, engines: list[ActorRef], timeout_s: float):
        self.engines = engines
        self.timeout_s = timeout_s

    @host_only
    def served_versions(self) -> dict[str, int]:
        """Engine name -> the policy version it reports serving."""
        versions = wait_all([(e, e.submit_host("get", "policy_version")) for e in self.engines], "policy_version", self.timeout_s)
        return {e.name: v for e, v in zip(self.engines, versions)}

    @property
    @host_only
    def policy_version(self) -> int:
        served = self.served_versions()
        if len(set(served.values())) > 1:
            raise WeightVersionError(f"engines serve different policy versions: {served}")
        return next(iter(served.values()))

    @needs_device
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        num = len(self.engines)
        bounds = [round(i * len(requests) / num) for i in range(num + 1)]
        pending = [
            (engine, engine.submit("generate", requests[lo:hi]))
            for engine, lo, hi in zip(self.engines, bounds, bounds[1:])
            if hi > lo
        ]
        return [g for chunk in wait_all(pending, "generate", self.timeout_s) for g in chunk]

    @needs_device
    def load_weights(self, handle: WeightHandle) -> None:
        """Every engine actor loads the handle (each reads the object store, the file, or
        receives the broadcast), together with the sender's pending work, if any."""
        loads = [(e, e.submit("load_weights", handle)) for e in self.engines]
        wait_all(loads + handle.pending(), "load_weights", self.timeout_s)

    @host_only
    def holdings(self) -> Holdings:
        """Nothing in this process: each engine actor declares its own holdings."""
        return Holdings()

    @host_only
    def close(self) -> None:
        """The executor stops the actors (``heron.cluster.ray_executor``); nothing to do here."""
