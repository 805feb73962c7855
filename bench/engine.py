"""Decode throughput of EmbeddedEngine, a vLLM server (engine.kind=vllm) and ``model.generate``
on the same toy model and batch, side by side in one run.

All three decode the same batch for exactly ``NUM_NEW_TOKENS`` sampled tokens per row (no early
stop: the engines get no stop tokens, generate gets ``min_new_tokens``), so all produce the same
token count. Runs are interleaved to share machine noise, in reverse order every other repeat;
repeat 0 is a warm-up; each ratio is the median over the repeats of the two rates in the same
repeat. vLLM's start-up
time (launch to healthy, weights loaded) is reported on its own line, not in its tokens/s. The
vLLM column needs ``.venv-vllm`` (``make vllm-venv``); without it the bench says so and skips it.
A second, GRPO-shaped case decodes ``NUM_GROUPS`` prompts x ``GROUP_SIZE`` samples with stop
tokens (``STOP``, ~1/16 of the vocabulary, so rows end at many different steps), the work heron's
rollouts do: the engine prefills each prompt once and drops finished rows (issue 14.4); generate
gets the prompts repeated (``num_return_sequences`` does the same) and the stop tokens as
``eos_token_id``. Lengths differ between the two (each samples its own tokens from the same
model), so this case compares samples/s; ``engine_before_14`` is the same engine with both
off and the model's forward decoding (the decode loop before issue 14). ``engine_hf_decoder``
is the engine with ``decoder="hf"``: what the lean decode step (heron.rollout.lean_decoder)
adds; ``engine_lean_unpacked`` with ``decoder="lean"``: what packing the linears' weights adds.
The last lines are ``engine: tokens_per_s_vs_generate=<embedded / generate>``, ``vllm: ...`` when it ran, and ``engine_grpo: samples_per_s_vs_generate=<embedded / generate>``
(> 1 means faster than generate). ``--model`` picks a size of bench/vs_trl.py (default 3M),
``--dtype`` the weights' dtype of every side (bfloat16: the engine as ``engine.embedded.dtype=bfloat16``).

    OMP_NUM_THREADS=2 .venv/bin/python bench/engine.py [--model 3M|25M] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heron.build import engine_spec  # noqa: E402
from heron.config.root import load_config  # noqa: E402
from heron.records import GenerationRequest, SamplingParams  # noqa: E402
from heron.rollout import EmbeddedEngine  # noqa: E402
from heron.rollout.registry import build_engine  # noqa: E402
from heron.rollout.vllm.build import REPO_ROOT  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402
from bench.vs_trl import MODELS  # noqa: E402

BATCH_SIZE = 32
NUM_NEW_TOKENS = 64
NUM_REPEATS = 9
NUM_GROUPS, GROUP_SIZE, GROUP_NEW_TOKENS = 8, 4, 32
STOP = tuple(range(3, 35))


def _vllm_engine(model_dir: Path, run_dir: Path):
    if not (REPO_ROOT / ".venv-vllm" / "bin" / "python").is_file():
        print("vllm: skipped (no .venv-vllm; run `make vllm-venv`)")
        return None
    data = run_dir / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    cfg = load_config(None, [
        f"model.path={model_dir}", f"data.path={data}", f"run.dir={run_dir}", "engine.kind=vllm",
        "engine.vllm.kv_cache_gib=0.25", f"rollout.max_batch_size={BATCH_SIZE}",
    ])
    return build_engine(engine_spec(cfg, pad_token_id=0))


def _ratio(rates: dict[str, list[float]], name: str, baseline: str) -> float:
    """The median over repeats of ``name``'s rate over ``baseline``'s in the same repeat: the two
    ran back to back, so a slow minute of this shared machine slows both (the ratio of the two
    medians moved by up to 0.3 between runs of the same code on 2026-12-06)."""
    return statistics.median(a / b for a, b in zip(rates[name], rates[baseline], strict=True))


def _timed_rates(runs: dict, expected_tokens: int | None) -> dict[str, list[float]]:
    """Per run: work units (tokens, or samples when ``expected_tokens`` is None) per second. The
    order of the runs reverses every repeat: a fixed-order A/B of two decode attentions showed a
    5-7 % gap that alternating the order removed (docs/speed.md, stop 34)."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(NUM_REPEATS + 1):  # repeat 0 is the warm-up
        for name, run in (list(runs.items()) if repeat % 2 == 0 else list(runs.items())[::-1]):
            start = time.perf_counter()
            num_units = run()
            elapsed = time.perf_counter() - start
            assert expected_tokens is None or num_units == expected_tokens, (name, num_units)
            if repeat:
                rates[name].append(num_units / elapsed)
    return rates


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="3M", choices=list(MODELS))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    prompts = make_prompts(BATCH_SIZE, seed=1, max_digits=3)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
        model_dir = create_toy_model(Path(tmp) / "model", corpus, MODELS[args.model])
        tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        engine = EmbeddedEngine.from_pretrained(model_dir)
        engine.model.to(getattr(torch, args.dtype))
        (Path(tmp) / "run").mkdir()
        vllm = _vllm_engine(model_dir, Path(tmp) / "run")
        try:
            _bench(engine, vllm, tokenizer, prompts)
            _bench_groups(engine, tokenizer, make_prompts(NUM_GROUPS, seed=2, max_digits=3))
        finally:
            if vllm is not None:
                vllm.close()


def _bench(engine: EmbeddedEngine, vllm, tokenizer, prompts) -> None:
    requests = [
        GenerationRequest(tokenizer(p.text)["input_ids"], SamplingParams(max_new_tokens=NUM_NEW_TOKENS, seed=i))
        for i, p in enumerate(prompts)
    ]
    hf_inputs = tokenizer([p.text for p in prompts], return_tensors="pt", padding=True)

    def run_generate() -> int:
        with torch.inference_mode():
            out = engine.model.generate(
                **hf_inputs, do_sample=True, use_cache=True, top_p=1.0, top_k=0,
                max_new_tokens=NUM_NEW_TOKENS, min_new_tokens=NUM_NEW_TOKENS,
            )
        return (out.shape[1] - hf_inputs["input_ids"].shape[1]) * out.shape[0]

    lean = EmbeddedEngine(engine.model, pad_token_id=engine.pad_token_id, decoder="lean")
    hf_decoder = EmbeddedEngine(engine.model, pad_token_id=engine.pad_token_id, decoder="hf")
    runs = {"engine": lambda: sum(len(g.tokens) for g in engine.generate(requests)),
            "engine_lean_unpacked": lambda: sum(len(g.tokens) for g in lean.generate(requests)),
            "engine_hf_decoder": lambda: sum(len(g.tokens) for g in hf_decoder.generate(requests)),
            "generate": run_generate}
    if vllm is not None:
        runs["vllm"] = lambda: sum(len(g.tokens) for g in vllm.generate(requests))
    rates = _timed_rates(runs, BATCH_SIZE * NUM_NEW_TOKENS)
    num_params = sum(p.numel() for p in engine.model.parameters())
    print(f"model: {num_params / 1e6:.2f} M params, batch {BATCH_SIZE}, {NUM_NEW_TOKENS} new tokens, "
          f"{torch.get_num_threads()} threads (heron side)")
    if vllm is not None:
        print(f"vllm: start-up {vllm.startup_s:.1f} s (launch to healthy; not in its tokens/s)")
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(values):.0f} tokens/s over {len(values)} runs "
              f"(min {min(values):.0f}, max {max(values):.0f})")
    print(f"engine: tokens_per_s_vs_unpacked={_ratio(rates, 'engine', 'engine_lean_unpacked'):.2f} "
          "(the lean step with torch's own linears, decoder=lean)")
    print(f"engine: tokens_per_s_vs_hf_decoder={_ratio(rates, 'engine', 'engine_hf_decoder'):.2f} "
          "(the same engine decoding with the model's forward, decoder=hf)")
    print(f"engine: tokens_per_s_vs_generate={_ratio(rates, 'engine', 'generate'):.2f}")
    if vllm is not None:
        print(f"vllm: tokens_per_s_vs_generate={_ratio(rates, 'vllm', 'generate'):.2f}")


def _bench_groups(engine: EmbeddedEngine, tokenizer, prompts) -> None:
    """The GRPO-shaped case: NUM_GROUPS prompts x GROUP_SIZE samples, stop tokens -> samples/s."""
    texts = [p.text for p in prompts for _ in range(GROUP_SIZE)]
    requests = [
        GenerationRequest(tokenizer(t)["input_ids"],
                          SamplingParams(max_new_tokens=GROUP_NEW_TOKENS, stop_token_ids=STOP, seed=i))
        for i, t in enumerate(texts)
    ]
    hf_inputs = tokenizer(texts, return_tensors="pt", padding=True)

    def run_generate() -> int:
        with torch.inference_mode():
            out = engine.model.generate(
                **hf_inputs, do_sample=True, use_cache=True, top_p=1.0, top_k=0, max_new_tokens=GROUP_NEW_TOKENS,
                eos_token_id=list(STOP), pad_token_id=engine.pad_token_id,
            )
        return out.shape[0]

    plain = EmbeddedEngine(engine.model, pad_token_id=engine.pad_token_id, share_prompts=False, drop_finished=False,
                           decoder="hf")
    runs = {"engine": lambda: len(engine.generate(requests)),
            "engine_before_14": lambda: len(plain.generate(requests)), "generate": run_generate}
    rates = _timed_rates(runs, None)
    lengths = [len(g.tokens) for g in engine.generate(requests)]
    print(f"grpo batch: {NUM_GROUPS} prompts x {GROUP_SIZE} samples, <= {GROUP_NEW_TOKENS} new tokens, "
          f"{len(STOP)} stop tokens (engine mean length {statistics.fmean(lengths):.1f}, max {max(lengths)})")
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(values):.1f} samples/s over {len(values)} runs "
              f"(min {min(values):.1f}, max {max(values):.1f})")
    ratio, before = _ratio(rates, "engine", "generate"), _ratio(rates, "engine", "engine_before_14")
    print(f"engine_grpo: samples_per_s_vs_before_14={before:.2f} (the same engine prefilling and decoding every row "
          "with the model's forward)")
    print(f"engine_grpo: samples_per_s_vs_generate={ratio:.2f}")


if __name__ == "__main__":
    main()
