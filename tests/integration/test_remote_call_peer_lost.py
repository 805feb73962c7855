"""A trainer rank killed mid-collective: the surviving rank's gloo collective fails at once with
"Connection reset by peer", often before Ray reports the killed actor. The driver must name the
dead rank, not the survivor's echo (CI saw the echo win under load). Real Ray actors stand in for
the ranks, with the order of the two events fixed: the echo first, the death a moment later."""

import os
import time

import pytest
import ray

from heron.cluster.errors import ClusterError
from heron.cluster.remote_call import ActorRef, wait_all

ECHO = "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:46800: Connection reset by peer"


@ray.remote(num_cpus=0, max_restarts=0)
class _Rank:
    def call(self, method):
        if method == "ping":
            return "up"
        if method == "echo":
            raise RuntimeError(ECHO)
        time.sleep(1.0)  # after the survivor's collective already failed
        if method == "die":
            os._exit(1)
        return "done"


def _ranks(*methods: str):
    actors = [ActorRef(_Rank.remote(), f"trainer-rank-{i}", timeout_s=120) for i in range(len(methods))]
    assert wait_all([(a, a.submit("ping")) for a in actors], "ping", 120) == ["up"] * len(actors)
    return [(a, a.submit(m)) for a, m in zip(actors, methods)]


def test_the_dead_peer_is_named_not_the_survivors_connection_error(ray_session):
    with pytest.raises(ClusterError, match=r"^trainer-rank-1 died during 'train'"):
        wait_all(_ranks("echo", "die"), "train", 120)


def test_a_lost_connection_without_a_dead_peer_is_one_line_naming_the_rank(ray_session):
    with pytest.raises(ClusterError) as error:
        wait_all(_ranks("echo", "finish"), "train", 120)
    assert str(error.value) == (
        "trainer-rank-0: a collective in 'train' lost its connection to a peer rank (it died or was killed; "
        "see its log): Read error [127.0.0.1]:46800: Connection reset by peer"
    )
