"""The preallocated KV cache (heron.rollout.kv_cache) against transformers' DynamicCache.

It hands attention the same key/value values over the same length (views of a buffer instead
of freshly concatenated tensors), so every logit, token and logprob is bit-identical: no
tolerance here. Checked at the layer, through the model, and through the whole engine with
shared prefills and dropped rows (which exercise ``batch_select_indices`` with repeats and
with shrinking row sets).
"""

import pytest
import torch
from transformers import DynamicCache

import heron.rollout.embedded as embedded_module
from heron.records import GenerationRequest, SamplingParams
from heron.rollout import EmbeddedEngine
from heron.rollout.kv_cache import PreallocatedLayer, join_caches, preallocated_cache
from tests.unit.test_engine_equivalence import _grpo_requests


@pytest.fixture(scope="module")
def model(toy_model_dir):
    return EmbeddedEngine.from_pretrained(toy_model_dir).model


def test_layer_returns_the_concatenation_of_everything_written():
    layer = PreallocatedLayer(capacity=7)
    chunks = [torch.randn(3, 2, length, 4) for length in (4, 1, 1)]  # [B, H, L, D]
    for i, chunk in enumerate(chunks):
        keys, values = layer.update(chunk, -chunk)
        expected = torch.cat(chunks[: i + 1], dim=-2)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
        assert layer.get_seq_length() == expected.shape[-2]
    layer.batch_select_indices(torch.tensor([2, 2, 0]))
    assert torch.equal(layer.keys, torch.cat(chunks, dim=-2)[[2, 2, 0]])
    keys, _ = layer.update(torch.ones(3, 2, 1, 4), torch.ones(3, 2, 1, 4))
    assert keys.shape == (3, 2, 7, 4) and torch.equal(keys[:, :, -1], torch.ones(3, 2, 4))


def test_layer_refuses_to_overflow_its_capacity():
    layer = PreallocatedLayer(capacity=2)
    layer.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    with pytest.raises(RuntimeError, match="KV cache full: 3 positions needed, capacity 2"):
        layer.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))


def test_join_caches_moves_each_caches_filled_slots_to_end_at_length(model):
    config = model.config
    heads, dim = config.num_key_value_heads, config.head_dim
    first, second = preallocated_cache(config, 4), preallocated_cache(config, 6)
    a, b = torch.randn(3, heads, 3, dim), torch.randn(2, heads, 5, dim)  # [R, H, L, D]
    for layer in first.layers:
        layer.update(a, -a)  # 3 of its 4 slots filled
    for layer in second.layers:
        layer.update(b, -b)  # 5 of its 6
    joined = join_caches(config, [first, second], length=5, capacity=9)
    for layer in joined.layers:
        assert (layer.filled, layer.capacity) == (5, 9)
        assert torch.equal(layer.keys[:3, :, 2:], a) and torch.equal(layer.values[:3, :, 2:], -a)
        assert not layer.keys[:3, :, :2].any() and not layer.values[:3, :, :2].any()  # left of the part: zeros
        assert torch.equal(layer.keys[3:], b) and torch.equal(layer.values[3:], -b)
        keys, _ = layer.update(torch.ones(5, heads, 1, dim), torch.ones(5, heads, 1, dim))
        assert keys.shape == (5, heads, 6, dim) and torch.equal(keys[:, :, -1], torch.ones(5, heads, dim))


@pytest.mark.portability
@torch.inference_mode()
def test_model_logits_are_bit_identical_to_dynamic_cache(model):
    torch.manual_seed(0)
    prompt = torch.randint(50, 200, (5, 9))  # [B, P]
    logits = {}
    for name, cache in {"dynamic": DynamicCache(config=model.config), "pre": preallocated_cache(model.config, 9 + 6)}.items():
        out = [model(input_ids=prompt, cache=cache, use_cache=True).logits[:, -1]]
        cache.batch_select_indices(torch.tensor([4, 0, 0, 2]))  # repeats and drops, as the engine does
        token = out[-1][[4, 0, 0, 2]].argmax(-1, keepdim=True)  # [B', 1]
        for step in range(5):
            out.append(model(input_ids=token, cache=cache, use_cache=True).logits[:, -1])
            token = out[-1].argmax(-1, keepdim=True)
        logits[name] = out
    for expected, actual in zip(logits["dynamic"], logits["pre"]):
        assert torch.equal(expected, actual)


@pytest.mark.portability
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
def test_engine_is_bit_identical_to_the_dynamic_cache_engine(model, order, monkeypatch):
    engine = EmbeddedEngine(model, pad_token_id=model.config.pad_token_id)
    requests = _grpo_requests(order)
    actual = engine.generate(requests)
    monkeypatch.setattr(embedded_module, "preallocated_cache", lambda config, capacity: DynamicCache(config=config))
    expected = engine.generate(requests)
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.finish_reason for g in actual] == [g.finish_reason for g in expected]
    for a, e in zip(actual, expected):
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(e.logprobs))


def test_the_cache_is_preallocated_for_prompt_plus_new_tokens(model, monkeypatch):
    """Each layer gets P + T positions, enough for every forward of the batch and no more."""
    made = []

    def recording(config, capacity):
        made.append(preallocated_cache(config, capacity))
        return made[-1]

    monkeypatch.setattr(embedded_module, "preallocated_cache", recording)
    prompts = [[5, 6, 7], [8] * 10]
    engine = EmbeddedEngine(model, pad_token_id=model.config.pad_token_id)
    engine.generate([GenerationRequest(p, SamplingParams(max_new_tokens=6, seed=i)) for i, p in enumerate(prompts)])
    [cache] = made
    assert {layer.capacity for layer in cache.layers} == {10 + 6}
    assert {layer.filled for layer in cache.layers} == {10 + 6 - 1}  # the last token is sampled, never fed
