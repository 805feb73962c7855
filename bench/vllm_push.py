"""A weight push into a real vLLM server, three ways side by side in one run (``engine.kind=vllm``).

- file: the object store's way (and, before, every transport's). The engine's process holds the
  state (as an engine actor does once Ray's object store brought it), writes it as one
  safetensors file (fsynced) and the worker reloads that file in place.
- file, fsynced: the same as the engine wrote it before this stop, its copy fsynced (the copy is
  written here through the same calls, then the server reloads it); ``file_vs_fsynced``.
- disk (``cluster.weight_transport=disk``): the worker reloads the file the trainer wrote (written
  here before the clock starts, as rank 0 writes it in a run, whichever way the engine loads it);
  before, the engine read that file and wrote the copy of the first way.
- broadcast: this process sends as trainer rank 0 does (``heron.weights.broadcast``, buckets of
  ``--bucket-mb``) and the server's worker, a member of the group, reloads each bucket as it
  arrives (``heron_vllm_worker.heron_receive_weights``): no file, no copy in the engine's process.

Buckets: ``--bucket-mb`` defaults to 16, so the 25 M model's 101 MB go in 7 buckets, as a 7 B
model's 14 GB go in 28 of the run default's 512 MB: the worker reloads one bucket while rank 0
copies the next. In one 512 MB bucket nothing overlaps (rank 0's copy, the send and the reload
run one after another).

Measured on the 2-core AMD EPYC (2026-12-08, 7 rounds): file 0.161 s, fsynced 0.210 (file 0.77x),
disk 0.107 (0.66x the file), broadcast 0.190 (1.18x the file, 0.90x the fsynced copy; 1.59x in
one 512 MB bucket, another run). On one CPU node an unsynced file in the page cache is the
fastest way from process to process; gloo's loopback TCP is not. What the broadcast into the
worker buys is elsewhere: no shared filesystem between nodes, one bucket of memory beside the
model instead of the whole push, and NCCL between GPUs (untested here).

The file side leaves out how the state reached the engine's process, so the ratios understate
what the worker's receive and the disk transport's file save a run. Each push is ``ServerEngine.load_weights`` end to end (the
layout check, the reload, the prefix-cache reset, the version check); pushes alternate, each
side's figure is its median. The last lines: ``vllm_push: file_vs_fsynced=<file s / fsynced s>``,
``vllm_push: disk_vs_file=<disk s / file s>`` and
``vllm_push: broadcast_vs_file=<broadcast s / file s>`` (< 1: faster than the file). Needs the vLLM venv (``make vllm-venv``); without it the bench
prints one line saying so.

    .venv/bin/python bench/vllm_push.py [--model 25M] [--rounds 5] [--bucket-mb 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.side_by_side import toy_model  # noqa: E402
from bench.vs_trl import MODELS  # noqa: E402


def _engine(model_dir: Path, run_dir: Path):
    from heron.build import engine_spec
    from heron.config.root import load_config
    from heron.rollout.registry import build_engine

    data = run_dir / "prompts.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    cfg = load_config(None, [
        f"model.path={model_dir}", f"run.dir={run_dir}", f"data.path={data}", "engine.kind=vllm",
        "engine.vllm.kv_cache_gib=0.25", "tracking.progress=false", "tracking.summary=false",
    ])
    return build_engine(engine_spec(cfg, pad_token_id=0))


def _broadcast_push(engine, sender, state, version: int) -> None:
    from heron.weights.broadcast import Broadcast
    from heron.weights.handle import WeightHandle

    sending = threading.Thread(target=sender.send, args=(state, version))
    sending.start()
    engine.load_weights(WeightHandle(version, Broadcast()))
    sending.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="25M", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bucket-mb", type=int, default=16)
    args = parser.parse_args()
    if not (REPO / ".venv-vllm" / "bin" / "python").exists():
        print("vllm_push: skipped (no .venv-vllm; `make vllm-venv` creates it)")
        return
    from heron.cluster.rendezvous import open_listener
    from heron.weights.broadcast import WeightBroadcastGroup
    from heron.weights.handle import InMemory, SafetensorsFile, WeightHandle

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = toy_model(args.model, MODELS[args.model], Path(tmp))
        engine = _engine(model_dir, Path(tmp) / "run")
        try:
            address = open_listener()
            joining = threading.Thread(target=engine.join_weight_group, args=(*address, 1, 2, 300.0, 0))
            joining.start()
            sender = WeightBroadcastGroup(*address, 0, 2, 300.0, bucket_bytes=args.bucket_mb << 20)
            joining.join()
            from safetensors.torch import load_file

            state = load_file(str(Path(model_dir) / "model.safetensors"))
            nbytes = sum(t.numel() * t.element_size() for t in state.values())
            times = {"file": [], "fsynced": [], "disk": [], "broadcast": []}
            version = 0
            for round_ in range(args.rounds + 1):  # round 0 warms every path up
                for side in list(times) if round_ % 2 else list(times)[::-1]:
                    version += 1
                    state = {k: v.add(1e-3) for k, v in state.items()}  # new weights every push
                    if side == "disk":  # the trainer's write, outside the engine's push
                        handle = WeightHandle(version, SafetensorsFile.write_version(state, Path(tmp) / "transport", version))
                    start = time.perf_counter()
                    if side == "file":
                        engine.load_weights(WeightHandle(version, InMemory(state)))
                    elif side == "disk":
                        engine.load_weights(handle)
                    elif side == "fsynced":  # the engine's copy as before: fsynced, then reloaded from
                        copy = SafetensorsFile.write_version(engine.layout.to_push(state), engine.weight_dir, version)
                        engine.load_weights(WeightHandle(version, copy))
                    else:
                        _broadcast_push(engine, sender, state, version)
                    assert engine.policy_version == version
                    if round_:
                        times[side].append(time.perf_counter() - start)
        finally:
            engine.close()
    median = {side: statistics.median(ts) for side, ts in times.items()}
    print(f"{args.model}: {nbytes / 1e6:.0f} MB of weights, {args.bucket_mb} MB buckets, {torch.get_num_threads()} threads")
    for side, ts in times.items():
        print(f"{side:9s} {median[side]:.3f} s  ({', '.join(f'{t:.3f}' for t in ts)})")
    print(f"vllm_push: file_vs_fsynced={median['file'] / median['fsynced']:.2f}  [{args.model}]")
    print(f"vllm_push: disk_vs_file={median['disk'] / median['file']:.2f}  [{args.model}]")
    print(f"vllm_push: broadcast_vs_file={median['broadcast'] / median['file']:.2f}  [{args.model}, {args.bucket_mb} MB buckets]")


if __name__ == "__main__":
    main()
