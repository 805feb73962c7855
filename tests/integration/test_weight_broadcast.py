"""The weight broadcast group (heron.weights.broadcast) on three real gloo processes, rank 0
sending and two engines receiving: bucketed sends (``cluster.weight_bucket_mb``) deliver every
tensor bit for bit, whatever the bucket size, with each flat buffer bounded by the bucket or by
the one tensor larger than it. The run-level pushes are in tests/integration/test_ray_run.py and
test_ray_loopback.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from heron.weights.broadcast import buckets
from tests.gloo_ranks import on_gloo_ranks

pytestmark = pytest.mark.portability


def _state() -> dict[str, torch.Tensor]:
    """Three dtypes, a tied alias, and a tensor of 4 KB among ones of 64-256 B."""
    g = torch.Generator().manual_seed(0)
    state = {
        "embed.weight": torch.randn(32, 32, generator=g),  # 4096 B
        "a.weight": torch.randn(16, 4, generator=g),  # 256 B
        "a.bias": torch.randn(16, generator=g),  # 64 B
        "b.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),  # 128 B
        "steps": torch.arange(5),
        "c.weight": torch.randn(4, 16, generator=g),  # 256 B
    }
    state["head.weight"] = state["embed.weight"]  # tied: sent once
    return state


def _push(rank: int, tmp, bucket_bytes: int) -> dict:
    from heron.cluster import rendezvous
    from heron.weights import broadcast

    address = [rendezvous.open_listener() if rank == 0 else None]
    dist.broadcast_object_list(address, src=0)  # rank 0's store address, over the test's own group
    group = broadcast.join(*address[0], rank, 3, timeout_s=60.0, bucket_bytes=bucket_bytes)
    sizes = []
    send = group._broadcast
    group._broadcast = lambda flat: (sizes.append(flat.numel() * flat.element_size()), send(flat))
    if rank == 0:
        group.send(_state(), version=4)
        return {"sent": sizes}
    received = group.receive(4)
    expected = _state()
    return {"names": sorted(received), "equal": all(torch.equal(received[n], expected[n]) and
                                                     received[n].dtype == expected[n].dtype for n in received),
            "received": sizes}


@pytest.mark.parametrize("bucket_bytes", [400, 1 << 20])
def test_bucketed_sends_deliver_every_tensor_bit_for_bit(tmp_path, bucket_bytes):
    sender, *engines = on_gloo_ranks(_push, 3, tmp_path, bucket_bytes)
    for engine in engines:
        assert engine["equal"]
        assert engine["names"] == sorted(set(_state()) - {"head.weight"})  # the tied alias once
        assert engine["received"] == sender["sent"]
    if bucket_bytes == 400:  # the 4 KB tensor alone, every other send within the bucket
        assert sender["sent"] == [128, 4096, 256 + 64, 256, 40]
    else:  # one send per dtype
        assert sender["sent"] == [128, 4096 + 256 + 64 + 256, 40]


def test_buckets_keep_one_dtype_and_the_order_and_put_a_large_tensor_alone():
    state = _state()
    del state["head.weight"]
    assert buckets(state, 400) == [
        ("torch.bfloat16", ["b.weight"]),
        ("torch.float32", ["embed.weight"]),
        ("torch.float32", ["a.weight", "a.bias"]),
        ("torch.float32", ["c.weight"]),
        ("torch.int64", ["steps"]),
    ]
    assert buckets(state, 64) == [
        ("torch.bfloat16", ["b.weight"]),
        ("torch.float32", ["embed.weight"]), ("torch.float32", ["a.weight"]), ("torch.float32", ["a.bias"]),
        ("torch.float32", ["c.weight"]),
        ("torch.int64", ["steps"]),
    ]


def _engine_push(rank: int, tmp, model_dir: str) -> dict:
    """Rank 0 pushes the toy model's weights (perturbed) in 64 KB buckets, then a push with a
    wrong shape; ranks 1-2 are embedded engines loading them as a broadcast arrives."""
    import time
    import weakref

    from safetensors.torch import load_file

    from heron.cluster import rendezvous
    from heron.rollout.embedded import EmbeddedEngine
    from heron.weights.broadcast import Broadcast, joined_group
    from heron.weights.handle import WeightHandle

    address = [rendezvous.open_listener() if rank == 0 else None]
    dist.broadcast_object_list(address, src=0)
    g = torch.Generator().manual_seed(0)
    pushed = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in load_file(f"{model_dir}/model.safetensors").items()}
    bad = dict(pushed, **{"model.norm.weight": torch.zeros(3)})
    if rank == 0:
        from heron.weights import broadcast

        group = broadcast.join(*address[0], 0, 3, timeout_s=60.0, bucket_bytes=64 << 10)
        group.send(pushed, 1)
        group.send(bad, 2)
        return {"buckets": len(buckets(pushed, 64 << 10))}
    engine = EmbeddedEngine.from_pretrained(model_dir)
    engine.join_weight_group(*address[0], rank, 3, 60.0, 0)
    alive_at_receive, buffers = [], []
    receive = joined_group()._broadcast

    def alive() -> int:
        """Earlier buckets' buffers still alive. gloo's worker threads drop their reference to a
        finished broadcast's buffer a moment after its wait returns, so this waits (up to 2 s) for
        the count to come down to the one bucket being copied: it does at once when buckets are
        released, and never when the whole push is kept."""
        deadline = time.monotonic() + 2.0
        while (count := sum(ref() is not None for ref in buffers)) > 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        return count

    def tracked(flat):
        alive_at_receive.append(alive())
        buffers.append(weakref.ref(flat))
        receive(flat)

    joined_group()._broadcast = tracked
    engine.load_weights(WeightHandle(1, Broadcast()))
    state = engine.model.state_dict()
    loaded = all(torch.equal(state[name], tensor) for name, tensor in pushed.items())
    try:
        engine.load_weights(WeightHandle(2, Broadcast()))
        refused = "no error"
    except ValueError as error:
        refused = str(error)
    unchanged = all(torch.equal(engine.model.state_dict()[name], tensor) for name, tensor in pushed.items())
    return {"loaded": loaded, "version": engine.policy_version, "refused": refused, "unchanged": unchanged,
            "alive_at_receive": alive_at_receive}


def test_an_embedded_engine_loads_a_broadcast_bucket_by_bucket_and_refuses_a_misfit_without_hanging(tmp_path, toy_model_dir):
    sender, *engines = on_gloo_ranks(_engine_push, 3, tmp_path, str(toy_model_dir))
    assert sender["buckets"] > 5
    for engine in engines:
        assert engine["loaded"] and engine["version"] == 1
        assert engine["refused"].startswith("load_weights: shape mismatch for 'model.norm.weight'")
        assert engine["unchanged"]  # and rank 0's second send completed: the refused push was drained
        # the first push's buckets: at most the one being copied is alive when the next arrives
        assert max(engine["alive_at_receive"][: sender["buckets"]]) <= 1
