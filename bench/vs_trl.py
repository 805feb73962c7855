"""heron against TRL's GRPOTrainer on the same work, side by side in one run (issue 14.1).

Both sides train the same local model folder (Qwen3 architecture, random weights, the toy
tokenizer) on the same prompts (2-digit addition, plain text) with the same reward
(bench/length_reward.py: the completion's length; exact match on random weights gives every
sample 0, and heron would leave those zero-advantage rows out of its step while TRL trains them):
``PROMPTS`` prompts x ``SAMPLES`` samples x at most ``NEW_TOKENS`` new tokens per rollout, one
optimizer step per rollout, ``NUM_STEPS`` steps, temperature 1, no KL term, fp32 (``--precision
bf16``: bf16 mixed precision for both trainers, heron's ``train.precision=bf16`` and TRL's
``bf16=True``, fp32 master weights on both sides; both generate in bf16 too: TRL's generation
runs under accelerate's autocast, heron's engine holds a bfloat16 copy, ``engine.embedded.dtype``;
on a CPU without native bf16 the bench prints one line instead: torch would emulate it),
``OMP_NUM_THREADS`` threads each (default 2; on a machine loaded far beyond its cores, 1: two
OpenMP threads per process then slowed both sides ~10x in one measurement).
Each run is a fresh process (heron: ``heron train``; TRL: bench/trl_grpo_peer.py in .venv-trl),
and runs alternate heron/TRL, then TRL/heron, so both share the machine's noise. A step's time
is the wall time of one rollout: generation, reward, training step (heron: ``time/rollout_s``;
TRL: on_step_begin to on_step_end). Start-up and step 1 (warm-up) are left out: each run's
figure is the median of steps 2..NUM_STEPS, each side's the median over its rounds. Each run's
line also gives the generation inside the step (heron: ``time/generate_s``; TRL: its
``GRPOTrainer._generate``), so the rest of the step (reward, training) reads off the difference.

``--instruction`` puts the same ~110-token instruction before every problem on both sides (as RL
prompts carry an instruction or a chat template; the addition problems alone are 4-5 tokens), and
tags the ratio line ``instruction prompt``.

``--new-tokens N`` lets every sample run to N new tokens instead of ``NEW_TOKENS`` (both sides; RL
responses are often hundreds of tokens, where decoding attends over a long cache) and tags the
ratio line ``N new tokens``.

``--compile`` runs heron with ``train.compile=true`` (its decoder layers compiled,
heron.trainer.compile; the first step compiles, and like every side's first step it is left out
of the median: a run pays it once) and tags the ratio line ``heron compiled``. TRL stays eager, its
faster setting here: ``--trl-compile`` (TrainingArguments' ``torch_compile``, the whole model)
measured 5.3 s/step (steps 2-8 at 4.8-5.8 s each) against TRL's ~1.8 eager on the 25 M bf16 run
(2026-12-06).

TRL lives in its own venv (``.venv-trl``, requirements-trl.txt: trl 1.16.0 with heron's torch,
transformers and tokenizers pins), created here when missing (~2 min); ``--no-venv`` skips the
TRL side instead when it is missing (CI). The last lines, one per model size, are
``vs_trl: samples_per_s_heron_vs_trl=<TRL s/step / heron s/step> (per round <the same ratio of each
round's two runs>)  [model]`` (> 1: heron is faster; the per-round ratios show the machine's noise).

    .venv/bin/python bench/vs_trl.py [--models toy,3M,25M] [--rounds 3] [--no-venv] [--precision bf16] [--instruction]
                                     [--compile] [--trl-compile] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.side_by_side import skips_emulated_bf16  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import ToyModelSpec, create_toy_model  # noqa: E402

PROMPTS, SAMPLES, NEW_TOKENS, NUM_STEPS, LR = 8, 4, 32, 8, 1e-6
# --instruction: prepended to every problem on both sides (~110 tokens with the toy tokenizer, which
# knows digits and spells English byte by byte), as RL prompts carry an instruction or chat template
INSTRUCTION = "Add the two numbers below and reply with their sum only, as digits, with no words, spaces or trailing period.\n"
TRL_VENV = REPO / ".venv-trl"
REWARD = f"{REPO / 'bench' / 'length_reward.py'}:completion_length"  # TRL: completion_lengths, the same values
MODELS = {
    "toy": ToyModelSpec(),
    "3M": ToyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768),
    "25M": ToyModelSpec(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=1536),
}


def trl_python(create: bool) -> Path | None:
    """.venv-trl's python, creating the venv when missing and ``create``; None when skipped."""
    python, stamp = TRL_VENV / "bin" / "python", TRL_VENV / ".installed"
    if stamp.is_file():
        return python
    if not create:
        print("vs_trl: TRL side skipped (no .venv-trl; run bench/vs_trl.py without --no-venv to create it)")
        return None
    print("vs_trl: creating .venv-trl (trl==1.16.0, torch==2.13.0 CPU; ~2 min)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(TRL_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REPO / "requirements-trl.txt")], check=True)
    stamp.touch()
    return python


def _run(command: list[str]) -> None:
    """Runs one side's process quietly; on failure raises with the tail of its output."""
    done = subprocess.run(command, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[1]} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
            "TOKENIZERS_PARALLELISM": "false", "RAY_AUTH_MODE": "disabled"}


@dataclasses.dataclass(frozen=True)
class Setup:
    """What both sides run, from the command line."""

    precision: str = "fp32"
    instruction: str = ""  # prepended to every prompt
    compile_model: bool = False  # heron's train.compile
    trl_compile: bool = False  # TRL's torch_compile
    new_tokens: int = NEW_TOKENS  # per sample, at most

    def tag(self, name: str) -> str:
        """The ratio line's tag: the model and every setting off its default."""
        return ", ".join([name] + ([self.precision] if self.precision != "fp32" else [])
                         + (["instruction prompt"] if self.instruction else [])
                         + (["heron compiled"] if self.compile_model else [])
                         + (["TRL compiled"] if self.trl_compile else [])
                         + ([f"{self.new_tokens} new tokens"] if self.new_tokens != NEW_TOKENS else []))


def heron_steps(model_dir: Path, data: Path, run_dir: Path, setup: Setup) -> tuple[list[float], list[float]]:
    """One fresh ``heron train`` run -> wall seconds of each rollout step, and of its generation."""
    overrides = [
        f"model.path={model_dir}", f"data.path={data}", f"run.dir={run_dir}", f"rollout.num_rollouts={NUM_STEPS}",
        f"rollout.batch_size={PROMPTS}", f"rollout.samples_per_prompt={SAMPLES}", f"rollout.max_new_tokens={setup.new_tokens}",
        "train.steps_per_rollout=1", f"train.micro_batch_size={PROMPTS * SAMPLES}", f"train.lr={LR}",
        "eval.interval=0", "checkpoint.enabled=false", f"train.precision={setup.precision}", f"reward.fn={REWARD}",
        *(["engine.embedded.dtype=bfloat16", "run.allow_emulated_bf16=true"] if setup.precision == "bf16" else []),
        *(["train.compile=true"] if setup.compile_model else []),
    ]
    _run([str(REPO / ".venv" / "bin" / "heron"), "train", *overrides])
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["time/rollout_s"] for r in records], [r["time/generate_s"] for r in records]


def trl_steps(python: Path, model_dir: Path, data: Path, out: Path, setup: Setup) -> tuple[list[float], list[float]]:
    """One fresh TRL GRPOTrainer run (bench/trl_grpo_peer.py) -> wall seconds of each step, and of
    its generation."""
    args = [str(model_dir), str(data), str(out), NUM_STEPS, PROMPTS, SAMPLES, setup.new_tokens, LR, setup.precision,
            "compile" if setup.trl_compile else "eager"]
    _run([str(python), str(REPO / "bench" / "trl_grpo_peer.py"), *map(str, args)])
    times = json.loads(out.read_text())
    return times["step_s"], times["generate_s"]


def bench_model(name: str, python: Path | None, tmp: Path, rounds: int, setup: Setup) -> tuple[float, list[float]] | None:
    """(TRL s/step / heron s/step from each side's median over rounds, the same ratio per round), or
    None without the TRL side."""
    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    # room for the longest prompt (the instruction's ~120 tokens) and the new tokens; RoPE's
    # frequencies do not depend on it, so the model computes the same at every length
    spec = dataclasses.replace(MODELS[name], max_positions=max(MODELS[name].max_positions, 256 + setup.new_tokens))
    model_dir = create_toy_model(tmp / name / "model", corpus, spec)
    data = tmp / name / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": setup.instruction + p.text, "label": p.label}) + "\n"
                            for p in make_prompts(PROMPTS * NUM_STEPS * 4, seed=1, max_digits=2)))
    medians: dict[str, list[float]] = {"heron": [], "trl": []}
    for round_id in range(rounds):
        sides = ["heron", "trl"] if round_id % 2 == 0 else ["trl", "heron"]
        for side in sides:
            if side == "trl" and python is None:
                continue
            out = tmp / name / f"{side}-{round_id}"
            steps, generation = (heron_steps(model_dir, data, out, setup) if side == "heron"
                                 else trl_steps(python, model_dir, data, out.with_suffix(".json"), setup))
            assert len(steps) == NUM_STEPS == len(generation), (side, steps, generation)
            medians[side].append(statistics.median(steps[1:]))
            print(f"  {name} round {round_id} {side}: median {medians[side][-1]:.3f} s/step, of which generation "
                  f"{statistics.median(generation[1:]):.3f} s (steps 2-{NUM_STEPS}: "
                  + " ".join(f"{s:.2f}" for s in steps[1:]) + ")", flush=True)
    if python is None:
        return None
    per_round = [trl / heron for trl, heron in zip(medians["trl"], medians["heron"])]
    return statistics.median(medians["trl"]) / statistics.median(medians["heron"]), per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {list(MODELS)}")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per model (3: the median drops one noisy round)")
    parser.add_argument("--no-venv", action="store_true", help="skip the TRL side when .venv-trl is missing")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="both trainers' precision")
    parser.add_argument("--instruction", action="store_true", help="prepend INSTRUCTION to every prompt (both sides)")
    parser.add_argument("--compile", action="store_true", help="heron with train.compile=true (its decoder layers compiled)")
    parser.add_argument("--trl-compile", action="store_true",
                        help="TRL with torch_compile=True (whole model; it recompiled every step here: slower)")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                        help=f"new tokens per sample, at most (default {NEW_TOKENS}: the issue's batch shape)")
    args = parser.parse_args()
    if args.new_tokens < 1:
        parser.error(f"--new-tokens {args.new_tokens}: must be at least 1")
    setup = Setup(args.precision, INSTRUCTION if args.instruction else "", args.compile, args.trl_compile, args.new_tokens)
    names = args.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {list(MODELS)}")
    if setup.precision == "bf16" and skips_emulated_bf16("vs_trl"):
        return
    python = trl_python(create=not args.no_venv)
    print(f"vs_trl: {PROMPTS} prompts x {SAMPLES} samples x {setup.new_tokens} new tokens, 1 optimizer step per rollout, "
          f"{NUM_STEPS} steps, median of steps 2-{NUM_STEPS}, {args.rounds} alternating rounds, {setup.precision}"
          + (f", every prompt after the instruction {INSTRUCTION!r}" if setup.instruction else "")
          + (", heron with train.compile=true" if setup.compile_model else "")
          + (", TRL with torch_compile=True" if setup.trl_compile else ""), flush=True)
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            ratios[name] = bench_model(name, python, Path(tmp), args.rounds, setup)
    for name, result in ratios.items():
        if result is not None:
            ratio, per_round = result
            print(f"vs_trl: samples_per_s_heron_vs_trl={ratio:.2f} (per round " + " ".join(f"{r:.2f}" for r in per_round)
                  + f")  [{setup.tag(name)}]")


if __name__ == "__main__":
    main()
