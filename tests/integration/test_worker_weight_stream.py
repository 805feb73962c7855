"""heron's vLLM worker extension receiving broadcast pushes (``heron_vllm_worker``, run inside
vLLM's worker; imported here by path, as vLLM imports it) on real gloo processes: rank 0 sends with
heron's ``WeightBroadcastGroup`` and the workers join and receive with the extension's own code.
Each push arrives bucket by bucket, bit for bit, under the checkpoint names heron asked for; a
worker that stops reading part-way (a failed reload) or drops the push (a refused layout) still
receives every bucket, so the sender completes. The extension inside a real vLLM server is tested
in tests/engines/test_vllm_engine.py."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from heron.rollout.vllm.launch_args import SERVER_SIDE
from tests.gloo_ranks import on_gloo_ranks
from tests.integration.test_weight_broadcast import _state  # three dtypes, a tied alias (sent once)

BUCKET_BYTES = 400  # several buckets: heron.weights.broadcast.buckets puts the 4 KB tensor alone


def _worker_module():
    sys.path.insert(0, str(SERVER_SIDE))
    import heron_vllm_worker

    return heron_vllm_worker


def _ranks(rank: int, tmp) -> dict:
    from heron.cluster import rendezvous
    from heron.weights.broadcast import WeightBroadcastGroup

    address = [rendezvous.open_listener() if rank == 0 else None]
    dist.broadcast_object_list(address, src=0)
    if rank == 0:
        group = WeightBroadcastGroup(*address[0], 0, 3, 60.0, bucket_bytes=BUCKET_BYTES)
        sizes = []
        send = group._broadcast
        group._broadcast = lambda flat: (sizes.append(flat.numel() * flat.element_size()), send(flat))
        for version in (1, 2, 3):
            group.send(_state(), version)
        return {"sends": sizes}
    worker = _worker_module()
    extension = worker.HeronWorkerExtension()
    assert extension.heron_join_weight_group(*map(str, address[0]), str(rank), "3", "60") == rank
    expected = _state()
    result = {"layout": extension.heron_weight_layout("1")}

    def stream(version: int, renames: dict):
        return worker._BucketStream(*extension._heron_group, version=version, renames=renames)

    # push 1: read to the end, two names renamed and one skipped
    whole = stream(1, {"a.weight": "model.a.weight", "c.weight": ""})
    got = dict(iter(whole))
    result["names"] = sorted(got)
    result["equal"] = all(torch.equal(got[n], expected[{"model.a.weight": "a.weight"}.get(n, n)]) for n in got)
    result["dtypes"] = sorted({str(t.dtype) for t in got.values()})
    result["received_1"] = whole.received
    # push 2: rank 1 stops after two tensors (a reload that failed), rank 2 reads one; both drain
    partial = stream(2, {})
    taken = [name for (name, _), _ in zip(iter(partial), range(rank))]
    partial.drain()
    result["taken_2"], result["received_2"] = taken, partial.received
    # push 3: dropped without a look (heron refused its layout)
    dropped = stream(3, {})
    dropped.drain()
    result["received_3"] = dropped.received
    return result


def test_the_worker_receives_each_push_bucket_by_bucket_and_always_completes_the_sender(tmp_path):
    sender, *workers = on_gloo_ranks(_ranks, 3, tmp_path)
    assert sender["sends"] == [128, 4096, 256 + 64, 256, 40] * 3  # every push sent in full: no hang
    for rank, worker in enumerate(workers, start=1):
        assert worker["layout"] == [
            {"dtype": "torch.bfloat16", "tensors": [["b.weight", [8, 8]]]},
            {"dtype": "torch.float32", "tensors": [["embed.weight", [32, 32]]]},
            {"dtype": "torch.float32", "tensors": [["a.weight", [16, 4]], ["a.bias", [16]]]},
            {"dtype": "torch.float32", "tensors": [["c.weight", [4, 16]]]},
            {"dtype": "torch.int64", "tensors": [["steps", [5]]]},
        ]
        assert worker["names"] == ["a.bias", "b.weight", "embed.weight", "model.a.weight", "steps"]
        assert worker["equal"] and worker["dtypes"] == ["torch.bfloat16", "torch.float32", "torch.int64"]
        assert worker["received_1"] == 6
        assert worker["taken_2"] == ["b.weight", "embed.weight"][:rank]
        assert worker["received_2"] == 6
        assert worker["received_3"] == 6
