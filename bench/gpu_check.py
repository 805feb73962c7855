"""The GPU check's RL part (bench/gpu_check.sh runs the GPU tier first, then this): a short
colocated RL run of a locally created random-weight Qwen3 (~0.5 B parameters on CUDA; a tiny one
with ``--tiny``), with and without offload, printing per rollout the generate / train / sleep / wake
times, peak device memory of both runs, sleep+wake time against a plain device<->host copy of the
same bytes, and generated tokens/s. The offloaded run profiles its second rollout
(``tracking.profile``): the report gives each stage's time in that trace, how many host operators
and device kernels it recorded, and the top operators by device time. No downloads: the tokenizer is
trained locally (heron.toy).

    python bench/gpu_check.py --out bench/out/gpu_check.txt            # CUDA, ~0.5 B
    python bench/gpu_check.py --device cpu --tiny --out /tmp/x.txt     # the same code on CPU (a test runs this)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

from heron import device as seam
from heron.config.root import load_config
from heron.loop import train
from heron.tracking.profiler import rollout_folder
from heron.residency.state import Residency
from heron.toy.addition import make_prompts, write_splits
from heron.toy.model import ToyModelSpec, create_toy_model

HALF_B = ToyModelSpec(hidden_size=1024, num_layers=36, num_heads=16, num_kv_heads=8, intermediate_size=3072,
                      max_positions=512, vocab_size=8192)  # ~0.5 B parameters (Qwen3-0.6B's width)
TINY = ToyModelSpec()


def make_assets(root: Path, spec: ToyModelSpec) -> dict[str, Path]:
    data = root / "data"
    if not (data / "train.jsonl").exists():
        write_splits(data, seed=0, max_digits=2, num_train=512, num_test=32)
    model = root / f"model-{spec.hidden_size}x{spec.num_layers}"
    if not (model / "config.json").exists():
        create_toy_model(model, [p.text + p.label for p in make_prompts(2000, seed=7, max_digits=2)], spec)
    return {"train": data / "train.jsonl", "model": model}


class TransitionTimes:
    """Wall time of every sleep / wake per component (Residency's own methods, timed from outside)."""

    def __init__(self, device: torch.device):
        self.device, self.times = device, defaultdict(list)
        self._sleep, self._wake = Residency.sleep, Residency.wake

    def __enter__(self):
        def timed(method, kind):
            def run(residency):
                start = time.perf_counter()
                method(residency)
                seam.synchronize(self.device)
                self.times[f"{residency.name}_{kind}"].append(time.perf_counter() - start)
            return run
        Residency.sleep, Residency.wake = timed(self._sleep, "sleep"), timed(self._wake, "wake")
        return self

    def __exit__(self, *exc):
        Residency.sleep, Residency.wake = self._sleep, self._wake


PROFILED = 1  # the rollout the offloaded run profiles (the first one is warm-up)


def run(assets, run_dir: Path, device: str, offload: bool, num_rollouts: int, tiny: bool):
    profile = [f"tracking.profile.rollouts=[{PROFILED}]"] if offload and num_rollouts > PROFILED else []
    cfg = load_config(None, [*profile,
        f"model.path={assets['model']}", f"data.path={assets['train']}", "eval.interval=0", f"run.dir={run_dir}",
        f"run.device={device}", f"colocate={str(offload).lower()}", f"rollout.num_rollouts={num_rollouts}",
        f"rollout.batch_size={2 if tiny else 16}", f"rollout.samples_per_prompt={2 if tiny else 8}",
        f"rollout.max_new_tokens={4 if tiny else 64}", f"train.micro_batch_size={2 if tiny else 16}",
        "rollout.max_batch_size=128",  # every sample of a rollout in one decode batch
        "checkpoint.enabled=false",  # no ~5 GB of model + AdamW writes per run (not what this measures)
        "tracking.progress=false", "tracking.summary=false", "tracking.plot=false",
    ])
    target = seam.resolve(device)
    seam.reset_peak(target)
    with TransitionTimes(target) as times:
        records = train(cfg)
    return records, dict(times.times), seam.peak_allocated(target)


def copy_reference_s(num_bytes: int, device: torch.device) -> float:
    """Seconds of one device->host->device copy of ``num_bytes`` (pinned host buffer on CUDA)."""
    if num_bytes == 0:
        return 0.0
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    host = torch.empty(num_bytes, dtype=torch.uint8, pin_memory=seam.pins_host_memory(device))
    seam.synchronize(device)
    start = time.perf_counter()
    host.copy_(src, non_blocking=True)
    seam.synchronize(device)
    src.copy_(host, non_blocking=True)
    seam.synchronize(device)
    return time.perf_counter() - start


def report(records, times, device, num_samples: int) -> list[str]:
    lines = ["rollout  generate_s  train_s  trainer_sleep_s  trainer_wake_s  engine_sleep_s  engine_wake_s  tokens_per_s"
             "  train_tflops"]
    for i, r in enumerate(records):
        tokens = r["response/length_mean"] * num_samples
        cols = [f"{r['time/generate_s']:.3f}", f"{r['time/train_s']:.3f}"]
        for key in ("trainer_sleep", "trainer_wake", "engine_sleep", "engine_wake"):
            values = times.get(key, [])
            share = values[i * len(values) // len(records): (i + 1) * len(values) // len(records)]
            cols.append(f"{sum(share):.3f}")
        cols.append(f"{tokens / r['time/generate_s']:.1f}")
        cols.append(f"{r.get('perf/train_tflops', float('nan')):.3g}")  # model FLOPs (heron.trainer.model_flops) per s
        lines.append(f"{r['rollout_id']:7d}  " + "  ".join(cols))
    released = max((r.get("memory/trainer_released_bytes", 0.0) for r in records), default=0.0)
    sleep_wake = [s + w for s, w in zip(times.get("trainer_sleep", []), times.get("trainer_wake", []))]
    reference = copy_reference_s(int(released), seam.resolve(device))
    lines.append(f"trainer released {released / 2**20:.1f} MiB per sleep; median sleep+wake "
                 f"{sorted(sleep_wake)[len(sleep_wake) // 2] if sleep_wake else float('nan'):.4f} s; "
                 f"plain device->host->device copy of the same bytes {reference:.4f} s")
    return lines


def profile_lines(run_dir: Path) -> list[str]:
    """What the profile of rollout ``PROFILED`` recorded: each stage's time, the host operators and
    device kernels in its trace, and the head of its table by device time (by host time on CPU)."""
    folder = rollout_folder(run_dir, PROFILED)
    if not (folder / "trace.json").is_file():
        return [f"profile: none written under {folder}"]
    events = [e for e in json.loads((folder / "trace.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    # the host ranges only: on CUDA each range also has a device-side annotation of the same name
    stages = {e["name"].removeprefix("heron."): e["dur"] / 1e6 for e in events
              if e["name"].startswith("heron.") and e.get("cat") == "user_annotation"}
    kernels = sum(e.get("cat") == "kernel" for e in events)
    host_ops = sum(e.get("cat") == "cpu_op" for e in events)
    last_table = "operators by " + (folder / "ops.txt").read_text().split("operators by ")[-1]
    return [f"profile of rollout {PROFILED}: " + ", ".join(f"{k} {v:.3f} s" for k, v in stages.items())
            + f"; {host_ops} host operators, {kernels} device kernels ({folder})", *last_table.splitlines()[:14]]


def _emit(out: Path, lines: list[str]) -> None:
    with out.open("a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def _mib(num_bytes) -> str:
    return "n/a (cpu)" if num_bytes is None else f"{num_bytes / 2**20:.1f} MiB"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="the tiny toy model (CPU check of the script)")
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--work", default="bench/out/gpu_check_work")
    parser.add_argument("--out", default="bench/out/gpu_check.txt")
    args = parser.parse_args(argv)
    work = Path(args.work)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    assets = make_assets(work, TINY if args.tiny else HALF_B)
    offloaded, times, peak_offload = run(assets, work / "offload", args.device, True, args.rollouts, args.tiny)
    # written before the second run, so a time-out there keeps the first run's figures
    lines = [f"gpu_check.py on {seam.resolve(args.device)} (torch {torch.__version__}), model {assets['model'].name}"]
    lines += report(offloaded, times, args.device, num_samples=4 if args.tiny else 128)
    lines += profile_lines(work / "offload")
    lines.append("records: " + json.dumps({k: v for k, v in offloaded[-1].items() if k.startswith("memory/")}))
    _emit(out, lines)
    _, _, peak_plain = run(assets, work / "plain", args.device, False, args.rollouts, args.tiny)
    _emit(out, [f"peak device memory allocated: with offload {_mib(peak_offload)}, without {_mib(peak_plain)}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
