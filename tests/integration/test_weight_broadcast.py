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
