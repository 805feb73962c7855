"""A user mistake found inside an actor reaches the driver as its own one-line error (issue 9,
item 2.7: a non-finite loss on a Ray trainer rank), not wrapped in Ray's traceback text, so the
CLI can print it as one line; other errors keep Ray's remote traceback."""

import pytest
import ray

from heron.cluster.remote_call import ActorRef
from heron.trainer.nonfinite import NonFiniteError


@ray.remote(num_cpus=0)
class _Raises:
    def call(self, method):
        if method == "user":
            raise NonFiniteError("non-finite loss=nan in optimizer step 1/1 of rollout 3; the step was not applied")
        raise ZeroDivisionError("a bug")


def test_a_user_error_in_an_actor_is_raised_as_itself(ray_session):
    actor = ActorRef(_Raises.remote(), "trainer rank 0", timeout_s=60)
    with pytest.raises(NonFiniteError) as e:
        actor.call("user")
    assert type(e.value) is NonFiniteError
    assert str(e.value) == "non-finite loss=nan in optimizer step 1/1 of rollout 3; the step was not applied"
    with pytest.raises(ZeroDivisionError) as e:
        actor.call("bug")
    assert "a bug" in str(e.value) and "\n" in str(e.value)  # the remote traceback stays for bugs
