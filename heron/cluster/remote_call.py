"""Remote calls with deadlines: every call names its actor, and a dead or hung actor becomes a
``ClusterError`` naming it within the deadline instead of a hang.

Waiting uses ``ray.wait`` one result at a time, so the first failure among several actors
(e.g. one trainer rank died while the others block in a collective) surfaces at once rather
than after the survivors time out. A rank whose collective hits the process group's timeout
(``cluster.collective_timeout_s``) names the ranks still inside the call: they never joined.
A rank whose collective lost its connection to a peer (gloo: "Connection reset by peer") is
the echo of a peer that died: its error can arrive before Ray reports the death, so the others'
results are awaited (within the call's deadline) and the dead peer is named if one died.
"""

from __future__ import annotations

import re
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
        try:
            results[index[ref]] = _get(actor, ref, what)
        except _CollectiveTimeout as timeout:
            raise _collective_error(actor, what, [pending[index[r]][0].name for r in remaining], timeout.cause) from None
        except _PeerLost as lost:
            raise _peer_lost_error(actor, what, [(pending[index[r]][0], r) for r in remaining], lost, deadline) from None
    return results


class _CollectiveTimeout(Exception):
    def __init__(self, cause: BaseException):
        self.cause = cause


class _PeerLost(Exception):
    def __init__(self, cause: BaseException):
        self.cause = cause  # the collective's RuntimeError


def _get(actor: ActorRef, ref: "ray.ObjectRef", what: str) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterError(f"{actor.name} died during '{what}': {cause}") from None
    except ray.exceptions.RayTaskError as e:
        if is_collective_timeout(e.cause):
            raise _CollectiveTimeout(e.cause) from None
        if is_peer_lost(e.cause):
            raise _PeerLost(e.cause) from None
        if isinstance(e.cause, UserError):  # found in the actor (a bad checkpoint, a non-finite loss): its one
            raise e.cause from None  # line, not Ray's traceback text around it
        raise e.as_instanceof_cause() from None


COLLECTIVE_TIMEOUTS = ("Timed out waiting", "collective operation timeout")  # gloo, nccl watchdog


def is_collective_timeout(error: BaseException | None) -> bool:
    """A torch.distributed collective that hit the process group's timeout."""
    return isinstance(error, RuntimeError) and any(marker in str(error) for marker in COLLECTIVE_TIMEOUTS)


PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")  # gloo's tcp transport


def is_peer_lost(error: BaseException | None) -> bool:
    """A torch.distributed collective whose connection to a peer broke (the peer usually died)."""
    return isinstance(error, RuntimeError) and any(marker in str(error) for marker in PEER_LOST)


def _peer_lost_error(actor: ActorRef, what: str, others: list[tuple[ActorRef, "ray.ObjectRef"]],
                     lost: _PeerLost, deadline: float) -> BaseException:
    """The first of ``others`` that died during the call (Ray reports a killed actor after its
    peers' collectives already failed), waited for until the call's deadline; else ``actor``'s
    own error, saying that a peer dropped out."""
    refs = [ref for _, ref in others]
    actors = {ref: other for other, ref in others}
    while refs:
        ready, refs = ray.wait(refs, num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
        if not ready:
            break
        try:
            _get(actors[ready[0]], ready[0], what)
        except ClusterError as died:  # RayActorError: this one is the cause
            return died
        except Exception:  # noqa: BLE001 -- another echo of the same loss; keep looking
            continue
    return ClusterError(f"{actor.name}: a collective in '{what}' lost its connection to a peer rank "
                        f"(it died or was killed; see its log): {_first_line(lost.cause)}")


def _collective_error(actor: ActorRef, what: str, still_running: list[str], cause: BaseException) -> ClusterError:
    """Names the ranks that never joined: those still inside the call when a peer's collective
    timed out (the one that timed out is waiting for them)."""
    detail = _first_line(cause)
    culprits = f"{', '.join(still_running)} never joined (hung or dead)" if still_running else "a peer never joined"
    return ClusterError(
        f"{actor.name}: a collective in '{what}' did not complete within cluster.collective_timeout_s: "
        f"{culprits}; {detail}"
    )


def _first_line(cause: BaseException) -> str:
    """The error's first line without gloo's "[file.cc:line]" prefix."""
    return re.sub(r"^\[[^\]]*\]\s*", "", str(cause).strip().splitlines()[0])
