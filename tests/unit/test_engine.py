"""EmbeddedEngine against the toy model: logprobs match a plain forward, seeding is per
request, stop/length endings, greedy equals HF generate, and load_weights checks its input.

Log-probabilities computed with another batch, padding or cache agree up to summation order
(tests/tolerance.py, rule 2); the sampled tokens then agree exactly, since a perturbation
delta of the probabilities moves one of D draws across a boundary with chance <= 2 D delta
(~1e-4 here: D <= 64 draws, delta ~1e-6)."""

import math

import pytest
import torch

from heron.records import GenerationRequest, SamplingParams
from heron.rollout import EmbeddedEngine, RolloutEngine
from heron.weights.handle import InMemory, WeightHandle
from tests.tolerance import assert_logprobs_close, reduction_length

PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23, 24]]


@pytest.fixture(scope="module")
def engine(toy_model_dir) -> EmbeddedEngine:
    return EmbeddedEngine.from_pretrained(toy_model_dir)


def _requests(**params) -> list[GenerationRequest]:
    return [GenerationRequest(p, SamplingParams(seed=i, **params)) for i, p in enumerate(PROMPTS)]


def _reference_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) at each generated token, from one unpadded full-sequence forward."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0]  # [P + N, V]
    logprobs = (logits[len(prompt) - 1 : -1] / temperature).log_softmax(-1)  # [N, V]
    return logprobs.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)  # [N]


def _assert_logprobs_close(engine, actual, expected):
    config = engine.model.config
    n = reduction_length(config, tokens=len(PROMPTS) * config.max_position_embeddings)
    assert_logprobs_close(actual, expected, n=n, log_vocab=math.log(config.vocab_size))


def test_implements_the_protocol(engine):
    assert isinstance(engine, RolloutEngine)


@pytest.mark.portability
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9)])
def test_logprobs_match_full_forward_with_left_padding(engine, temperature, top_p):
    generations = engine.generate(_requests(max_new_tokens=12, temperature=temperature, top_p=top_p))
    for prompt, gen in zip(PROMPTS, generations):
        assert len(gen.tokens) == len(gen.logprobs) == 12
        expected = _reference_logprobs(engine.model, prompt, gen.tokens, temperature)
        _assert_logprobs_close(engine, gen.logprobs, expected)


def test_same_seed_same_tokens_other_seed_other_tokens(engine):
    request = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=32, seed=123))
    other_seed = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=32, seed=124))
    first, second, third = engine.generate([request, request, other_seed])
    assert first.tokens == second.tokens == engine.generate([request])[0].tokens
    assert first.tokens != third.tokens


@pytest.mark.portability
def test_request_is_independent_of_its_batch(engine):
    requests = _requests(max_new_tokens=16, temperature=0.8, top_p=0.95)
    batched = engine.generate(requests)
    chunked = EmbeddedEngine(engine.model, pad_token_id=engine.pad_token_id, max_batch_size=3)
    small_batches = chunked.generate(requests)
    for request, gen, gen_small in zip(requests, batched, small_batches):
        alone = engine.generate([request])[0]
        assert alone.tokens == gen.tokens == gen_small.tokens
        _assert_logprobs_close(engine, alone.logprobs, gen.logprobs)


@pytest.mark.portability
def test_stop_token_ends_row_and_is_kept(engine):
    free = engine.generate(_requests(max_new_tokens=20))
    stop_token = free[0].tokens[5]
    first_hit = free[0].tokens.index(stop_token)
    requests = _requests(max_new_tokens=20, stop_token_ids=(stop_token,))
    stopped = engine.generate(requests)[0]
    assert stopped.finish_reason == "stop"
    assert stopped.tokens == free[0].tokens[: first_hit + 1]
    assert stopped.tokens[-1] == stop_token
    _assert_logprobs_close(engine, stopped.logprobs, free[0].logprobs[: first_hit + 1])


def test_decoding_stops_once_every_row_has_finished(engine):
    first_tokens = [g.tokens[0] for g in engine.generate(_requests(max_new_tokens=1))]
    num_forwards = 0

    def count_forward(*_):
        nonlocal num_forwards
        num_forwards += 1

    handle = engine.model.register_forward_hook(count_forward)
    try:
        generations = engine.generate(_requests(max_new_tokens=50, stop_token_ids=tuple(first_tokens)))
    finally:
        handle.remove()
    assert num_forwards == 1  # the prefill only
    assert [g.tokens for g in generations] == [[t] for t in first_tokens]
    assert {g.finish_reason for g in generations} == {"stop"}


def test_max_new_tokens_ends_row_with_length(engine):
    requests = [
        GenerationRequest(PROMPTS[1], SamplingParams(max_new_tokens=3, seed=0)),
        GenerationRequest(PROMPTS[2], SamplingParams(max_new_tokens=9, seed=1)),
    ]
    short, long = engine.generate(requests)
    assert (len(short.tokens), short.finish_reason) == (3, "length")
    assert (len(long.tokens), long.finish_reason) == (9, "length")


@pytest.mark.portability
def test_greedy_matches_hf_generate(engine):
    for prompt in PROMPTS:
        request = GenerationRequest(prompt, SamplingParams(max_new_tokens=10, greedy=True, seed=99))
        ours = engine.generate([request])[0]
        with torch.no_grad():
            hf = engine.model.generate(
                torch.tensor([prompt]), do_sample=False, max_new_tokens=10, min_new_tokens=10,
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            )
        assert ours.tokens == hf[0, len(prompt) :].tolist()
        expected = _reference_logprobs(engine.model, prompt, ours.tokens, temperature=1.0)
        _assert_logprobs_close(engine, ours.logprobs, expected)


def test_invalid_request_raises(engine):
    with pytest.raises(ValueError, match="temperature"):
        engine.generate([GenerationRequest([5], SamplingParams(temperature=0.0))])
    with pytest.raises(ValueError, match="prompt_tokens"):
        engine.generate([GenerationRequest([], SamplingParams())])


def test_load_weights_updates_version_and_outputs(toy_model_dir):
    engine = EmbeddedEngine.from_pretrained(toy_model_dir)  # own copy: weights change below
    request = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=8, seed=3))
    before = engine.generate([request])[0]
    state = {name: tensor * 3.0 for name, tensor in engine.model.state_dict().items()}
    param_ids = {id(p) for p in engine.model.parameters()}
    engine.load_weights(WeightHandle(5, InMemory(state)))
    after = engine.generate([request])[0]
    assert engine.policy_version == after.policy_version == 5 and before.policy_version == 0
    assert after.logprobs != before.logprobs
    assert {id(p) for p in engine.model.parameters()} == param_ids  # updated in place
    for name, tensor in engine.model.state_dict().items():
        assert torch.equal(tensor, state[name])


def test_load_weights_rejects_bad_state(toy_model_dir):
    engine = EmbeddedEngine.from_pretrained(toy_model_dir)
    good = {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}
    name = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        engine.load_weights(WeightHandle(1, InMemory({**good, "nope": torch.zeros(1)})))
    with pytest.raises(ValueError, match=f"shape mismatch for '{name}'"):
        engine.load_weights(WeightHandle(1, InMemory({**good, name: torch.zeros(3)})))
    with pytest.raises(ValueError, match=f"missing key '{name}'"):
        engine.load_weights(WeightHandle(1, InMemory({k: v for k, v in good.items() if k != name})))
    assert engine.policy_version == 0
    # Of tied parameters one name suffices (lm_head.weight is model.embed_tokens.weight).
    engine.load_weights(WeightHandle(2, InMemory({k: v for k, v in good.items() if k != "lm_head.weight"})))
    assert engine.policy_version == 2
