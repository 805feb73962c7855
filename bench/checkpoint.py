"""Checkpoint save throughput and how long an async save blocks the loop.

State: a ~25 M-parameter model (6 x Linear(2048, 2048)) with AdamW state, ~300 MB in all.
1. ``save_vs_raw_write``: a sync heron save (DCP files fsync'd, manifest with a checksum of every
   file, atomic commit) against a raw sequential write of the same tensor bytes into one file
   with one fsync, on the same disk, interleaved, median of the repeats. Ratio of throughputs
   (raw time / save time): 1.0 means the save costs no more than writing the bytes.
   ``save_vs_dd``: the same against ``dd bs=4M conv=fsync`` copying those bytes (from the page
   cache) into a new file, the issue's yardstick. Target >= 1.0.
2. ``async_block_vs_sync``: time ``save`` blocks the caller with ``checkpoint.async`` (the
   fingerprints and small files; the host copy runs in the save's own thread, and the next
   optimizer step waits for it, heron.checkpoint.shards) over the time of a sync save. Target
   <= 0.1. The first async save is reported separately (it allocates the host buffers that
   later saves reuse).

    OMP_NUM_THREADS=1 .venv/bin/python bench/checkpoint.py [--dir runs/bench-checkpoint]
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import torch

from heron.checkpoint.layout import fsync_path
from heron.checkpoint.shards import ModuleShards
from heron.checkpoint.writer import CheckpointWriter

WIDTH, NUM_LAYERS, NUM_REPEATS = 2048, 6, 5


def build_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(NUM_LAYERS)])
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, WIDTH)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def tensors_of(model, optimizer) -> list[torch.Tensor]:
    out = [p.detach() for p in model.parameters()]
    for state in optimizer.state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out


def raw_write(path: Path, tensors: list[torch.Tensor]) -> float:
    """Sequential write of the tensors' bytes into one file, fsync'd (file and folder)."""
    start = time.perf_counter()
    with open(path, "wb") as f:
        for t in tensors:
            f.write(memoryview(t.reshape(-1).contiguous().view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())
    fsync_path(path.parent)
    return time.perf_counter() - start


def dd_copy(source: Path, target: Path) -> float:
    """``dd`` copying ``source`` (just written, so in the page cache) to ``target``, fsync'd."""
    start = time.perf_counter()
    subprocess.run(["dd", f"if={source}", f"of={target}", "bs=4M", "conv=fsync", "status=none"], check=True)
    fsync_path(target.parent)
    return time.perf_counter() - start


def timed_save(writer: CheckpointWriter, shards: ModuleShards, rollout_id: int) -> tuple[float, float, int]:
    """(seconds the caller was blocked, seconds until committed, bytes committed)."""
    start = time.perf_counter()
    writer.save(rollout_id, shards, {"bench": True})
    blocked = time.perf_counter() - start
    writer.wait()
    return blocked, time.perf_counter() - start, writer.last_stats["bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="runs/bench-checkpoint", help="folder on the disk to measure")
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # a heron run has its model classes loaded; the first save would time their import (~2 s)
    importlib.import_module("transformers.modeling_utils")

    model, optimizer = build_state()
    tensors = tensors_of(model, optimizer)
    num_bytes = sum(t.numel() * t.element_size() for t in tensors)
    # keep_last=0: deleting old checkpoints is not part of writing one (nor of the raw write)
    sync_writer = CheckpointWriter(root / "sync", async_save=False, keep_last=0)
    async_writer = CheckpointWriter(root / "async", async_save=True, keep_last=0)
    shards = ModuleShards(model, optimizer)  # one per process, as a trainer holds: staging buffers are reused
    first_block_s, _, _ = timed_save(async_writer, shards, 0)  # allocates the host buffers
    sync_s, raw_s, dd_s, async_block_s, async_total_s = [], [], [], [], []
    for repeat in range(1, NUM_REPEATS + 1):
        sync_s.append(timed_save(sync_writer, shards, repeat)[1])
        shutil.rmtree(sync_writer.last_committed)
        raw_s.append(raw_write(root / "raw.bin", tensors))
        dd_s.append(dd_copy(root / "raw.bin", root / "dd.bin"))
        (root / "raw.bin").unlink()
        (root / "dd.bin").unlink()
        blocked, total, saved_bytes = timed_save(async_writer, shards, repeat)
        shutil.rmtree(async_writer.last_committed)
        async_block_s.append(blocked)
        async_total_s.append(total)
    async_writer.close()
    shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    print(f"state: {num_bytes / 1e6:.0f} MB of tensors, checkpoint {saved_bytes / 1e6:.0f} MB on disk, {NUM_REPEATS} repeats")
    print(f"sync save: median {med(sync_s):.2f} s ({num_bytes / 1e6 / med(sync_s):.0f} MB/s)  runs {[round(s, 2) for s in sync_s]}")
    print(f"raw fsync'd write: median {med(raw_s):.2f} s ({num_bytes / 1e6 / med(raw_s):.0f} MB/s)  runs {[round(s, 2) for s in raw_s]}")
    print(f"dd conv=fsync: median {med(dd_s):.2f} s ({num_bytes / 1e6 / med(dd_s):.0f} MB/s)  runs {[round(s, 2) for s in dd_s]}")
    print(f"async save: blocks median {med(async_block_s) * 1e3:.1f} ms (first save: {first_block_s * 1e3:.1f} ms), "
          f"committed after {med(async_total_s):.2f} s")
    print(f"checkpoint: save_vs_raw_write={med(raw_s) / med(sync_s):.2f} save_vs_dd={med(dd_s) / med(sync_s):.2f} "
          f"async_block_vs_sync={med(async_block_s) / med(sync_s):.3f}")


if __name__ == "__main__":
    main()
