"""Where one heron rollout step spends its time, stage by stage, for one model size (issue 14.1).

The same work as bench/vs_trl.py (8 prompts x 4 samples x <= 32 new tokens, one optimizer step
per rollout, its reward: bench/length_reward.py) in this process, with a checkpoint after every
rollout so its cost shows. Each stage of the loop (heron.loop) is timed around its call: generate, reward,
old-logprobs (the trainer's separate pi_old forward, 0 when heron.trainer.old_logprobs skips it),
train step (the train call without that forward), push (weights into the engine), checkpoint
(the save call; with async saves, the part that blocks the loop: the background copy and write
then compete with the next stages for the cores, which shows in their times, not in this line;
measured on 2 cores, 25M model in bf16: generate 0.83 s with ``checkpoint.enabled=false``, 1.5 s
with a save of its 300 MB after every rollout, with the save threads at nice 0, 10 or 19).
Medians over steps 2..N.

Then the training step's matmul floor, to show how much of the step is left to speed up. One
more rollout's batch is trained three times: under ``torch.utils.flop_counter.FlopCounterMode``
(the step's matmul FLOPs: forward, backward, attention), timed alone (the step the floor is set
against) and under ``torch.profiler`` (the seconds its matmul kernels took). This CPU's matmul
rate in the step's compute dtype is the median of a ``[2048, 2048] x [2048, 2048]`` product
(float32, or bfloat16 for ``train.precision=bf16``). The floor is the FLOPs at the faster of that
rate and the step's own kernels' rate: cutting overhead, fusing or skipping non-matmul work
cannot take the same maths below it; only a faster matmul kernel than both could. The line
before the last gives the samples/s a step would reach with its train step scaled to that floor
and every other stage as measured: the most that work on the train step's overhead can give
(bench/vs_trl.py's TRL s/step over it bounds the ratio to TRL the same way). The last line
is ``throughput: samples_per_s=<samples per step / median step time>  [model]``.

    OMP_NUM_THREADS=2 .venv/bin/python bench/throughput.py [--model toy|3M|25M] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.vs_trl import LR, MODELS, NEW_TOKENS, PROMPTS, REWARD, SAMPLES  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from heron.config.root import load_config  # noqa: E402
from heron.rl_run import RLRun  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402

STAGES = ["generate", "reward", "old_logprobs", "train_step", "push", "checkpoint"]
# torch.profiler's names for the matmul kernels a train step runs (plain, batched, with a bias,
# oneDNN's linear)
MATMUL_KERNELS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "mkldnn::_linear_pointwise"}


def _timer(times: dict[str, float], name: str, fn):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[name] += time.perf_counter() - start
    return timed


def run_steps(run: RLRun, num_steps: int) -> list[dict[str, float]]:
    """The loop of heron.loop.run_rollouts with every stage timed -> one {stage: s} per step."""
    steps = []
    times: dict[str, float] = defaultdict(float)
    trainer = run.c.trainer
    if hasattr(trainer, "_recompute_old_logprobs"):  # PolicyTrainer in this process
        trainer._recompute_old_logprobs = _timer(times, "old_logprobs", trainer._recompute_old_logprobs)
    for rollout_id in list(run.rollout_ids())[:num_steps]:
        times.clear()
        start = time.perf_counter()
        batch = _timer(times, "generate", run.generate)(rollout_id)
        batch = _timer(times, "reward", run.reward)(batch)
        batch = run.postprocess(run.advantages(batch))
        train_metrics = _timer(times, "train", run.train)(batch)
        _timer(times, "push", run.push_weights)()
        run.log(batch, train_metrics, {})
        _timer(times, "checkpoint", run.checkpoint)(rollout_id)
        times["train_step"] = times.pop("train") - times["old_logprobs"]
        steps.append({**{s: times[s] for s in STAGES}, "total": time.perf_counter() - start})
    return steps


def matmul_rate(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """This CPU's matmul FLOP/s in ``dtype``: the median of ``repeats`` [size, size] x [size, size]
    products (2 size^3 FLOPs each) after one warm-up."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def matmul_floor(run: RLRun, rollout_id: int) -> dict[str, float]:
    """One more rollout's train step, run three times on the same batch: under FlopCounterMode
    (its matmul FLOPs), timed, and under torch.profiler (the seconds of its matmul kernels)."""
    batch = run.postprocess(run.advantages(run.reward(run.generate(rollout_id))))
    counter = FlopCounterMode(display=False)
    with counter:
        run.train(batch)
    start = time.perf_counter()
    metrics = run.train(batch)
    wall = time.perf_counter() - start
    with torch.profiler.profile() as profile:
        run.train(batch)
    kernel_us = sum(e.self_cpu_time_total for e in profile.key_averages() if e.key in MATMUL_KERNELS)
    return {"flops": counter.get_total_flops(), "kernel_s": kernel_us / 1e6, "wall_s": wall,
            "model_flops": metrics.get("model_flops", float("nan"))}


def print_floor(floor: dict[str, float], dtype: torch.dtype) -> float:
    """The floor is the FLOPs at the faster of two rates: the 2048^3 product's and the step's own
    kernels' (a step's shapes can beat the square product). -> the floor over the step's time."""
    product_rate, step_rate = matmul_rate(dtype), floor["flops"] / floor["kernel_s"]
    floor_s = floor["flops"] / max(product_rate, step_rate)
    print(f"  train step matmuls: {floor['flops'] / 1e9:.1f} GFLOP (forward, backward, attention), their kernels "
          f"{floor['kernel_s']:.3f} s under the profiler ({step_rate / 1e9:.0f} GFLOP/s)")
    print(f"  {str(dtype).removeprefix('torch.')} 2048^3 product: {product_rate / 1e9:.0f} GFLOP/s; matmul floor "
          f"{floor_s:.3f} s, the same batch's train step {floor['wall_s']:.3f} s is {floor['wall_s'] / floor_s:.2f}x it")
    model_flops, peak = floor["model_flops"], product_rate / 1e12
    print(f"  model FLOPs (train/model_flops): {model_flops / 1e9:.1f} GFLOP, {model_flops / floor['flops']:.2f}x the "
          f"counted (causal pairs of real tokens, not padding or the full score matrix); with tracking.peak_tflops="
          f"{peak:.3f} this step's perf/mfu is {model_flops / floor['wall_s'] / product_rate:.2f}")
    return min(1.0, floor_s / floor["wall_s"])  # a noisy timed call can come in under the floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="3M", choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("overrides", nargs="*", help="more key.sub=value config overrides (e.g. checkpoint.async_=true)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
        model_dir = create_toy_model(Path(tmp) / "model", corpus, MODELS[args.model])
        data = Path(tmp) / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": p.text, "label": p.label}) + "\n"
                                for p in make_prompts(PROMPTS * args.steps * 4, seed=1, max_digits=2)))
        cfg = load_config(None, [
            f"model.path={model_dir}", f"data.path={data}", f"run.dir={Path(tmp) / 'run'}",
            f"rollout.num_rollouts={args.steps + 1}", f"rollout.batch_size={PROMPTS}", f"rollout.samples_per_prompt={SAMPLES}",
            f"rollout.max_new_tokens={NEW_TOKENS}", "train.steps_per_rollout=1", f"train.micro_batch_size={PROMPTS * SAMPLES}",
            f"train.lr={LR}", "eval.interval=0", "checkpoint.interval=1", f"reward.fn={REWARD}", *args.overrides,
        ])
        with RLRun(cfg) as run:
            num_params = sum(p.numel() for p in run.c.engine.model.parameters()) if hasattr(run.c.engine, "model") else 0
            floor_rollout = list(run.rollout_ids())[args.steps]
            steps = run_steps(run, args.steps)[1:]  # step 1 is the warm-up
            if run.checkpointer.writer is not None:
                run.checkpointer.writer.wait()  # no save in the background of the floor's two calls
            floor = matmul_floor(run, floor_rollout)
            dtype = torch.bfloat16 if cfg.train.precision == "bf16" else torch.float32
    total = statistics.median(s["total"] for s in steps)
    print(f"throughput [{args.model}, {num_params / 1e6:.2f} M params]: {PROMPTS} prompts x {SAMPLES} samples x "
          f"<= {NEW_TOKENS} new tokens, medians of steps 2-{args.steps}")
    for stage in STAGES + ["total"]:
        median = statistics.median(s[stage] for s in steps)
        print(f"  {stage:<13} {median:7.3f} s  ({100 * median / total:5.1f} %)")
    floor_fraction = print_floor(floor, dtype)
    step = statistics.median(s["train_step"] for s in steps)
    at_floor = total - step * (1 - floor_fraction)
    print(f"  with every train step at its matmul floor ({floor_fraction:.2f}x its time) and the other stages as "
          f"measured: {PROMPTS * SAMPLES / at_floor:.1f} samples/s, {total / at_floor:.2f}x now")
    print(f"throughput: samples_per_s={PROMPTS * SAMPLES / total:.1f}  [{args.model}]")


if __name__ == "__main__":
    main()
