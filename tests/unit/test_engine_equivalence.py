"""The faster embedded engine (issue 14.4) against the decode loop it replaced
(tests/reference_decoder.py), on GRPO-shaped batches: groups of requests with the same prompt,
prompts of different lengths (left padding), rows that end at different steps (stop tokens,
per-row max_new_tokens), temperature, top-p and greedy rows mixed.

What may differ, and the bound (tests/tolerance.py):
- ``share_prompts`` prefills each distinct prompt once and copies its KV cache to the group's
  rows; ``drop_finished`` removes finished rows from the decode batch. Both change only how many
  rows each matmul holds, i.e. at most the summation order of each row's results (rule 2):
  logprobs agree within 2 gamma(n) (|lp| + log V). The tokens then agree exactly (rule 4: a
  perturbation delta ~1e-6 of the probabilities moves one of D <= 1,000 draws across a
  boundary with chance <= 2 D delta ~ 2e-3).
- With both off, one padded prefill (``prefill_forward_tokens=None``) and ``decoder="lean"``
  (torch's own linears) the engine does the same operations as the reference: bit-identical.
  The default decoder packs the linears' weights for oneDNN, which sums in another order: the
  first test's bound covers it.
"""

import math

import pytest
import torch

from heron.records import GenerationRequest, SamplingParams
from heron.rollout import EmbeddedEngine
from tests.reference_decoder import reference_generate
from tests.tolerance import assert_logprobs_close, reduction_length

PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23, 24], [30, 31], [40] * 7]
SAMPLES_PER_PROMPT = 4
STOP = tuple(range(3, 40))  # ~7 % of the toy vocabulary: rows end at many different steps


def _grpo_requests(order: str) -> list[GenerationRequest]:
    """len(PROMPTS) groups of SAMPLES_PER_PROMPT; ``order`` "grouped" (a group's rows adjacent,
    as RolloutGenerator sends them) or "interleaved" (every group scattered over the batch)."""
    requests = []
    for k, prompt in enumerate(PROMPTS):
        for i in range(SAMPLES_PER_PROMPT):
            params = SamplingParams(
                max_new_tokens=24 if i % 3 else 7, temperature=0.8 if k % 2 else 1.0,
                top_p=0.9 if k % 3 == 1 else 1.0, stop_token_ids=STOP if i != 1 else (),
                seed=100 * k + i, greedy=k == 5 and i == 0,
            )
            requests.append(GenerationRequest(prompt, params))
    if order == "interleaved":
        requests = [requests[i * SAMPLES_PER_PROMPT + s] for s in range(SAMPLES_PER_PROMPT) for i in range(len(PROMPTS))]
    return requests


@pytest.fixture(scope="module")
def model(toy_model_dir):
    return EmbeddedEngine.from_pretrained(toy_model_dir).model


def _engine(model, **kwargs) -> EmbeddedEngine:
    return EmbeddedEngine(model, pad_token_id=model.config.pad_token_id, **kwargs)


@pytest.mark.portability
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
def test_shared_prefill_and_dropped_rows_match_the_reference(model, order):
    requests = _grpo_requests(order)
    expected = reference_generate(model, model.config.pad_token_id, requests)
    actual = _engine(model).generate(requests)
    lengths = {len(g.tokens) for g in expected}
    assert len(lengths) >= 5 and {g.finish_reason for g in expected} == {"stop", "length"}, lengths  # a real mix
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.finish_reason for g in actual] == [g.finish_reason for g in expected]
    config = model.config
    n = reduction_length(config, tokens=len(requests) * config.max_position_embeddings)
    flat = lambda gens: [lp for g in gens for lp in g.logprobs]  # noqa: E731
    assert_logprobs_close(flat(actual), flat(expected), n=n, log_vocab=math.log(config.vocab_size))


@pytest.mark.portability
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
def test_without_sharing_or_dropping_the_engine_is_bit_identical_to_the_reference(model, order):
    requests = _grpo_requests(order)
    expected = reference_generate(model, model.config.pad_token_id, requests)
    engine = _engine(model, share_prompts=False, drop_finished=False, decoder="lean", prefill_forward_tokens=None)
    actual = engine.generate(requests)
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.finish_reason for g in actual] == [g.finish_reason for g in expected]
    for a, e in zip(actual, expected):
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(e.logprobs))


def long_prompt_requests() -> list[GenerationRequest]:
    """Prompts of 3, 90, 5 and 80 tokens, 3 samples each: one padded forward would run 4 x 90 + 64
    = 424 prefill tokens, two groups 180 + 10 + 2 x 64 = 318 (heron.rollout.batch_rows)."""
    prompts = [[5 + (7 * i + k) % 50 for i in range(n)] for k, n in enumerate([3, 90, 5, 80])]
    return [
        GenerationRequest(prompt, SamplingParams(max_new_tokens=12, temperature=0.9, seed=10 * k + i,
                                                 stop_token_ids=STOP if i else ()))
        for k, prompt in enumerate(prompts) for i in range(3)
    ]


def assert_matches_reference(actual, expected, config, num_requests: int) -> None:
    """Tokens and finish reasons identical, logprobs within the summation-order bound (rule 2)."""
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.finish_reason for g in actual] == [g.finish_reason for g in expected]
    n = reduction_length(config, tokens=num_requests * config.max_position_embeddings)
    flat = lambda gens: [lp for g in gens for lp in g.logprobs]  # noqa: E731
    assert_logprobs_close(flat(actual), flat(expected), n=n, log_vocab=math.log(config.vocab_size))


@pytest.mark.portability
def test_prompts_of_very_different_lengths_are_prefilled_in_groups_and_match_the_reference(model):
    requests = long_prompt_requests()
    engine = _engine(model)
    assert _rows_per_forward(engine, requests)[:3] == [2, 2, len(requests)]  # two prefill groups, then decode
    expected = reference_generate(model, model.config.pad_token_id, requests)
    assert_matches_reference(engine.generate(requests), expected, model.config, len(requests))


def _rows_per_forward(engine: EmbeddedEngine, requests) -> list[int]:
    rows: list[int] = []
    handle = engine.model.register_forward_hook(lambda _m, args, kwargs, _out: rows.append(kwargs["input_ids"].shape[0]),
                                                with_kwargs=True)
    try:
        engine.generate(requests)
    finally:
        handle.remove()
    return rows


def test_each_prompt_is_prefilled_once_and_finished_rows_leave_the_batch(model):
    requests = _grpo_requests("interleaved")
    engine = _engine(model, min_rows=1)
    rows = _rows_per_forward(engine, requests)
    assert rows[0] == len(PROMPTS)  # the prefill: one row per distinct prompt
    decode = rows[1:]
    assert decode[0] <= len(requests) and decode == sorted(decode, reverse=True), decode
    assert decode[-1] < len(requests) // 2, decode  # most rows had finished and left the batch
    plain = _rows_per_forward(_engine(model, share_prompts=False, drop_finished=False, prefill_forward_tokens=None), requests)
    assert set(plain) == {len(requests)} and len(plain) == len(rows)  # same number of steps, every row each time


def test_min_rows_keeps_the_decode_batch_from_shrinking_below_it(model):
    requests = _grpo_requests("grouped")
    rows = _rows_per_forward(_engine(model, min_rows=16), requests)
    assert min(rows[1:]) == 16 and max(rows[1:]) < len(requests), rows


def test_min_rows_must_be_positive(model):
    with pytest.raises(ValueError, match="min_rows"):
        _engine(model, min_rows=0)
