"""Remote calls with deadlines: every call names its actor, and a dead or hung actor becomes a
``ClusterError`` naming it within the deadline instead of a hang.

Waiting uses ``ray.wait`` one result at a time, so the first failure among several actors
(e.g. one trainer rank died while the others block in a collective) surfaces at once rather
than after the survivors time out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

from heron.cluster.errors import ClusterError
from heron.errors import UserError


@dataclass
class ActorRef:
    """A ``ComponentHost`` actor with the name used in every error about it."""

    handle: Any  # ray.actor.ActorHandle
    name: str
    timeout_s: float

    def submit(self, method: str, *args, **kwargs) -> "ray.ObjectRef":
        return self.handle.call.remote(method, *args, **kwargs)

    def submit_host(self, host_method: str, *args) -> "ray.ObjectRef":
        return getattr(self.handle, host_method).remote(*args)

    def call(self, method: str, *args, **kwargs) -> Any:
        """Runs ``component.method(*args, **kwargs)`` in the actor; waits at most ``timeout_s``."""
        return wait_all([(self, self.submit(method, *args, **kwargs))], method, self.timeout_s)[0]

    def get(self, attribute: str) -> Any:
        """Reads ``component.attribute`` (e.g. the served ``policy_version``)."""
        return wait_all([(self, self.submit_host("get", attribute))], f"get {attribute}", self.timeout_s)[0]


@dataclass
class PendingBroadcast:
    """A weight push that trainer rank 0 has started sending; engines finish it by receiving."""

    sender: list[tuple[ActorRef, "ray.ObjectRef"]]
    version: int


def wait_all(pending: list[tuple[ActorRef, "ray.ObjectRef"]], what: str, timeout_s: float) -> list[Any]:
    """Results of ``pending`` (actor, ref) pairs, in order; raises on the first failure."""
    index = {ref: i for i, (_, ref) in enumerate(pending)}
    results: list[Any] = [None] * len(pending)
    deadline = time.monotonic() + timeout_s
    remaining = [ref for _, ref in pending]
    while remaining:
        left = deadline - time.monotonic()
        ready, remaining = ray.wait(remaining, num_returns=1, timeout=max(left, 0.0))
        if not ready:
            names = ", ".join(pending[index[r]][0].name for r in remaining)
            raise ClusterError(
                f"{names}: '{what}' did not finish within {timeout_s:g}s (hung or overloaded actor); "
                f"raise cluster.call_timeout_s if the work is just slow"
            )
        ref = ready[0]
        actor = pending[index[ref]][0]
        results[index[ref]] = _get(actor, ref, what)
    return results


def _get(actor: ActorRef, ref: "ray.ObjectRef", what: str) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(f"{actor.name} died during '{what}': {cause}") from None
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, UserError):  # found in the actor (a bad checkpoint, a non-finite loss): its one
            raise e.cause from None  # line, not Ray's traceback text around it
        raise e.as_instanceof_cause() from None
