"""How the embedded engine moves its decode batch's rows, side by side in one run.

**Cache rows** (``heron.rollout.kv_cache.PreallocatedLayer.batch_select_indices``): the engine
copies its KV cache's rows when it spreads each prompt's prefill over the prompt's samples and
each time a row finishes and leaves the batch. The buffers hold prompt + ``max_new_tokens`` slots;
copying only the slots written so far (now) against copying whole buffers (``whole_buffers``,
before), on a GRPO-shaped batch (``GROUPS`` prompts x ``SAMPLES`` samples) whose rows end on stop
tokens (8 of the 512-token vocabulary) long before a generous ``--new-tokens`` budget, as RL answers
do. Both sides produce the same tokens (checked); runs alternate, in turn first, after a warm-up
(``bench.side_by_side.alternate``).
**Prefill groups** (``heron.rollout.batch_rows.prefill_groups``): prompts of very different
lengths (``PROMPT_LENGTHS``, random tokens, as chat-templated problems differ) prefilled in
groups of similar length (now) against one forward padded to the longest (``prefill_forward_tokens
=None``, before), the same GRPO shape, ``--new-tokens`` sampled tokens per row (no stop tokens).
The two differ in summation order only; the share of one run's tokens both sides sampled alike is
printed.

The last lines are ``decode_batches: cache_rows_speedup=<before / now>`` and
``decode_batches: prefill_groups_speedup=<before / now>`` (medians of the per-pair ratios; > 1:
now is faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/decode_batches.py [--model 3M|25M] [--new-tokens 256]
        [--prefill-new-tokens 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.side_by_side import alternate  # noqa: E402
from bench.vs_trl import MODELS  # noqa: E402
from heron.records import GenerationRequest, SamplingParams  # noqa: E402
from heron.rollout import EmbeddedEngine  # noqa: E402
from heron.rollout.kv_cache import PreallocatedLayer  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402

GROUPS, SAMPLES = 8, 4
STOP = tuple(range(3, 11))
PAIRS = 7
PROMPT_LENGTHS = (60, 85, 110, 130, 150, 180, 210, 250)


def whole_buffers(layer: PreallocatedLayer, indices: torch.Tensor) -> None:
    """``batch_select_indices`` before: every slot of the buffers copied, written or not."""
    if layer.is_initialized:
        layer._key_store = layer._key_store[indices]
        layer._value_store = layer._value_store[indices]
        layer._expose()


def _requests(tokenizer, new_tokens: int) -> list[GenerationRequest]:
    prompts = make_prompts(GROUPS, seed=1, max_digits=2)
    return [
        GenerationRequest(tokenizer(p.text)["input_ids"],
                          SamplingParams(max_new_tokens=new_tokens, stop_token_ids=STOP, seed=100 * g + i))
        for g, p in enumerate(prompts) for i in range(SAMPLES)
    ]


def _long_prompt_requests(vocab_size: int, new_tokens: int) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab_size, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]
    return [GenerationRequest(p, SamplingParams(max_new_tokens=new_tokens, seed=100 * g + i))
            for g, p in enumerate(prompts) for i in range(SAMPLES)]


def _generate(engine: EmbeddedEngine, requests, tokens: dict, name: str,
              select=PreallocatedLayer.batch_select_indices) -> Callable[[], None]:
    """A step for ``alternate``: ``engine`` decodes ``requests`` with ``select`` as the cache's
    row selection; the tokens it sampled go to ``tokens[name]``."""
    def step() -> None:
        now, PreallocatedLayer.batch_select_indices = PreallocatedLayer.batch_select_indices, select
        try:
            tokens[name] = [g.tokens for g in engine.generate(requests)]
        finally:
            PreallocatedLayer.batch_select_indices = now
    return step


def _speedup(label: str, times: dict[str, list[float]]) -> float:
    """Prints each round's before/now; the median of those ratios."""
    ratios = [before / now for before, now in zip(times["before"], times["now"])]
    for before, now, ratio in zip(times["before"], times["now"], ratios):
        print(f"{label}: before {before:.3f} s  now {now:.3f} s  before/now {ratio:.2f}")
    return statistics.median(ratios)


def cache_rows(engine: EmbeddedEngine, requests) -> float:
    tokens: dict[str, list[list[int]]] = {}
    times = alternate({"before": _generate(engine, requests, tokens, "before", whole_buffers),
                       "now": _generate(engine, requests, tokens, "now")}, PAIRS)
    if tokens["now"] != tokens["before"]:
        raise AssertionError("the two sides sampled different tokens")
    lengths = [len(t) for t in tokens["now"]]
    print(f"cache rows: answer lengths {min(lengths)}-{max(lengths)}, mean {statistics.mean(lengths):.0f}")
    return _speedup("cache rows", times)


def prefill_groups(engine: EmbeddedEngine, requests) -> float:
    before = EmbeddedEngine(engine.model, pad_token_id=engine.pad_token_id, prefill_forward_tokens=None)
    tokens: dict[str, list[list[int]]] = {}
    times = alternate({"before": _generate(before, requests, tokens, "before"),
                       "now": _generate(engine, requests, tokens, "now")}, PAIRS)
    same = sum(a == b for x, y in zip(tokens["now"], tokens["before"]) for a, b in zip(x, y))
    print(f"prefill groups: prompts of {min(PROMPT_LENGTHS)}-{max(PROMPT_LENGTHS)} tokens; tokens sampled alike "
          f"by both sides in a run: {same}/{sum(len(x) for x in tokens['now'])}")
    return _speedup("prefill groups", times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="3M", choices=list(MODELS))
    parser.add_argument("--new-tokens", type=int, default=256, help="the cache-rows case's max_new_tokens")
    parser.add_argument("--prefill-new-tokens", type=int, default=32, help="the prefill-groups case's new tokens")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        prompts = make_prompts(64, seed=1, max_digits=2)
        spec = MODELS[args.model]
        spec = dataclasses.replace(spec, max_positions=max(spec.max_positions, max(PROMPT_LENGTHS) + args.new_tokens))
        model_dir = create_toy_model(Path(tmp) / "model", [p.text for p in prompts], spec)
        engine = EmbeddedEngine.from_pretrained(model_dir)
        requests = _requests(AutoTokenizer.from_pretrained(model_dir), args.new_tokens)
        rows = cache_rows(engine, requests)
        groups = prefill_groups(engine, _long_prompt_requests(engine.model.config.vocab_size, args.prefill_new_tokens))
        print(f"decode_batches: cache_rows_speedup={rows:.2f}  [{args.model}, {args.new_tokens} new tokens at most]")
        print(f"decode_batches: prefill_groups_speedup={groups:.2f}  [{args.model}, {args.prefill_new_tokens} new tokens]")


if __name__ == "__main__":
    main()
