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
Medians over steps 2..N; the last line is ``throughput: samples_per_s=<samples per step / median step time>  [model]``.

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
from heron.config.root import load_config  # noqa: E402
from heron.rl_run import RLRun  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402

STAGES = ["generate", "reward", "old_logprobs", "train_step", "push", "checkpoint"]


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
            f"rollout.num_rollouts={args.steps}", f"rollout.batch_size={PROMPTS}", f"rollout.samples_per_prompt={SAMPLES}",
            f"rollout.max_new_tokens={NEW_TOKENS}", "train.steps_per_rollout=1", f"train.micro_batch_size={PROMPTS * SAMPLES}",
            f"train.lr={LR}", "eval.interval=0", "checkpoint.interval=1", f"reward.fn={REWARD}", *args.overrides,
        ])
        with RLRun(cfg) as run:
            num_params = sum(p.numel() for p in run.c.engine.model.parameters()) if hasattr(run.c.engine, "model") else 0
            steps = run_steps(run, args.steps)[1:]  # step 1 is the warm-up
    total = statistics.median(s["total"] for s in steps)
    print(f"throughput [{args.model}, {num_params / 1e6:.2f} M params]: {PROMPTS} prompts x {SAMPLES} samples x "
          f"<= {NEW_TOKENS} new tokens, medians of steps 2-{args.steps}")
    for stage in STAGES + ["total"]:
        median = statistics.median(s[stage] for s in steps)
        print(f"  {stage:<13} {median:7.3f} s  ({100 * median / total:5.1f} %)")
    print(f"throughput: samples_per_s={PROMPTS * SAMPLES / total:.1f}  [{args.model}]")


if __name__ == "__main__":
    main()
