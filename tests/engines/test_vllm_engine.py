"""The vLLM engine against a real vLLM server on the toy model (one server for the module):
heron's logprob convention, seeded reproducibility, stopping, in-place versioned weight pushes
that give the embedded engine's outputs, refusals before anything changes, residency on CPU.

Reference logprobs come from one unpadded HF forward over prompt + generated tokens; the
tolerance is derived in tests/engines/tolerance.py."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from safetensors.torch import load_file

from heron.records import GenerationRequest, SamplingParams
from heron.residency.coordinator import Coordinator
from heron.residency.state import State
from heron.residency.wiring import attach
from heron.rollout import EmbeddedEngine, RolloutEngine
from heron.rollout.sampling import top_p_filter
from heron.weights.broadcast import buckets
from heron.weights.handle import InMemory, SafetensorsFile, WeightHandle
from tests.engines.tolerance import logprob_tolerance

pytestmark = pytest.mark.engines

PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23, 24]]
# longer than a KV block (16-128 tokens): its prefix stays in vLLM's prefix cache between calls
LONG_PROMPT = [5 + (7 * i) % 250 for i in range(200)]


@pytest.fixture(scope="module")
def config(toy_model_dir) -> dict:
    return json.loads((toy_model_dir / "config.json").read_text())


@pytest.fixture(scope="module")
def reference(toy_model_dir) -> EmbeddedEngine:
    return EmbeddedEngine.from_pretrained(toy_model_dir)  # its own copy: pushes change it


def _requests(**params) -> list[GenerationRequest]:
    return [GenerationRequest(p, SamplingParams(seed=i, **params)) for i, p in enumerate(PROMPTS)]


def _logits(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Next-token logits [N, V] at each generated position, from one unpadded forward."""
    with torch.no_grad():
        return model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]


def _handle(state: dict[str, torch.Tensor], version: int) -> WeightHandle:
    return WeightHandle(version, InMemory(state))


def _gather(logprobs: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    return logprobs.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)  # [N]


def test_implements_the_protocol_and_serves_the_model_folder(vllm_engine):
    assert isinstance(vllm_engine, RolloutEngine)
    assert vllm_engine.health() and vllm_engine.policy_version == 0
    assert vllm_engine.served_versions() == {"engine": 0}
    assert vllm_engine.startup_s is not None and vllm_engine.startup_s > 0
    print(f"vLLM start-up: {vllm_engine.startup_s:.1f} s")


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9)])
def test_logprobs_are_at_the_temperature_before_top_p(vllm_engine, reference, config, temperature, top_p):
    generations = vllm_engine.generate(_requests(max_new_tokens=12, temperature=temperature, top_p=top_p))
    for prompt, gen in zip(PROMPTS, generations):
        assert len(gen.tokens) == len(gen.logprobs) == 12 and gen.finish_reason == "length" and gen.policy_version == 0
        logits = _logits(reference.model, prompt, gen.tokens)  # [N, V]
        scaled = logits / temperature
        tol = logprob_tolerance(config, float(logits.abs().max()), temperature)
        expected = _gather(scaled.log_softmax(-1), gen.tokens)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=tol, rtol=0)
        if top_p < 1:  # the test can tell the conventions apart: vLLM's own is after top-p
            truncated = _gather(top_p_filter(scaled, torch.full((len(gen.tokens),), top_p)).log_softmax(-1), gen.tokens)
            assert (torch.tensor(gen.logprobs) - truncated).abs().max() > 10 * tol


def test_seeded_requests_reproduce_independently_of_their_batch(vllm_engine):
    request = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=24, seed=123))
    other_seed = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=24, seed=124))
    crowd = _requests(max_new_tokens=24, temperature=0.8)
    alone = vllm_engine.generate([request])[0]
    in_batch = vllm_engine.generate([*crowd, request, other_seed])
    assert in_batch[len(crowd)].tokens == alone.tokens == vllm_engine.generate([request])[0].tokens
    assert in_batch[len(crowd) + 1].tokens != alone.tokens


def test_stop_token_ends_the_row_and_is_kept_with_its_logprob(vllm_engine):
    free = vllm_engine.generate(_requests(max_new_tokens=20))[0]
    stop_token = free.tokens[5]
    first_hit = free.tokens.index(stop_token)
    stopped = vllm_engine.generate(_requests(max_new_tokens=20, stop_token_ids=(stop_token,)))[0]
    assert stopped.finish_reason == "stop" and stopped.tokens == free.tokens[: first_hit + 1]
    torch.testing.assert_close(stopped.logprobs, free.logprobs[: first_hit + 1], atol=1e-5, rtol=0)


def test_a_prompt_longer_than_the_server_allows_is_refused_before_sending(vllm_engine):
    too_long = GenerationRequest(list(range(5, 5 + 250)), SamplingParams(max_new_tokens=16))
    with pytest.raises(ValueError, match=r"request 0: prompt \(250 tokens\) \+ max_new_tokens \(16\) exceeds .*max_model_len=256"):
        vllm_engine.generate([too_long])


def test_residency_on_cpu_is_a_no_op_the_state_machine_tracks(vllm_engine):
    residency = attach(vllm_engine, "engine", vllm_engine.holdings(), offload=True,
                       coordinator=Coordinator(colocate=False), wait_timeout_s=60)
    try:
        assert residency.state is State.ASLEEP  # offloaded components rest asleep
        [gen] = vllm_engine.generate(_requests(max_new_tokens=4)[:1])
        assert len(gen.tokens) == 4 and residency.state is State.ASLEEP and residency.num_transitions >= 3
        assert vllm_engine.memory_report() == {"params": 0, "buffers": 0, "kv_cache": 0}
    finally:
        vllm_engine.residency = None


def _assert_same_greedy(gen, ref_gen, model, prompt, config) -> None:
    """Greedy tokens equal the reference's; a divergence is accepted only at a near-tie of the
    reference's top-2 logits (within the derived logit error), where either choice is right."""
    logits = _logits(model, prompt, ref_gen.tokens)  # [N, V]
    tol = logprob_tolerance(config, float(logits.abs().max()))
    diverged = next((i for i, (a, b) in enumerate(zip(gen.tokens, ref_gen.tokens)) if a != b), None)
    if diverged is not None:
        top2 = logits[diverged].topk(2).values
        assert float(top2[0] - top2[1]) <= tol, (diverged, gen.tokens, ref_gen.tokens)
        return
    assert gen.tokens == ref_gen.tokens
    torch.testing.assert_close(gen.logprobs, ref_gen.logprobs, atol=tol, rtol=0)


def test_weight_push_gives_the_embedded_engines_outputs_for_the_same_weights(vllm_engine, reference, toy_model_dir, config,
                                                                            tmp_path):
    prompts = [*PROMPTS, LONG_PROMPT]
    greedy = [GenerationRequest(p, SamplingParams(max_new_tokens=12, greedy=True)) for p in prompts]
    before = vllm_engine.generate(greedy)  # the long prompt's first blocks are in vLLM's prefix cache now
    original = load_file(str(toy_model_dir / "model.safetensors"))
    g = torch.Generator().manual_seed(1)
    for version in (1, 2):
        pushed = {k: (v + 0.05 * torch.randn(v.shape, generator=g)).contiguous() for k, v in original.items()}
        # version 2 arrives as a file (the disk transport): the engine only calls handle.tensors()
        handle = _handle(pushed, version) if version == 1 else WeightHandle(version, SafetensorsFile.write_version(pushed, tmp_path, version))
        vllm_engine.load_weights(handle)
        reference.load_weights(handle)
        assert vllm_engine.policy_version == version
        ours, expected = vllm_engine.generate(greedy), reference.generate(greedy)
        assert all(gen.policy_version == version for gen in ours)
        for prompt, gen, ref_gen in zip(prompts, ours, expected):  # stale cached KV would show on the long one
            _assert_same_greedy(gen, ref_gen, reference.model, prompt, config)
        assert [g_.tokens for g_ in ours] != [b.tokens for b in before]
    vllm_engine.load_weights(_handle(original, 0))  # back to the folder's weights: the outputs come back
    assert [g_.tokens for g_ in vllm_engine.generate(greedy)] == [b.tokens for b in before]


def test_a_push_that_does_not_fit_changes_nothing(vllm_engine, toy_model_dir):
    greedy = _requests(max_new_tokens=8, greedy=True)
    before, version = vllm_engine.generate(greedy), vllm_engine.policy_version
    bad = dict(load_file(str(toy_model_dir / "model.safetensors")))
    bad["model.norm.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match="shape mismatch for 'model.norm.weight'"):
        vllm_engine.load_weights(_handle(bad, version + 1))
    assert vllm_engine.policy_version == version
    assert [g.tokens for g in vllm_engine.generate(greedy)] == [b.tokens for b in before]


def test_a_broadcast_push_loads_in_the_servers_worker_bucket_by_bucket(vllm_engine, reference, toy_model_dir, config):
    """cluster.weight_transport=broadcast: this process sends as trainer rank 0 would, the server's
    worker joins the group and reloads each 64 KB bucket as it arrives (no file, no copy in the
    engine's process); the outputs are the embedded engine's for the same weights. A push that
    does not fit is received and dropped: the sender completes, nothing changes."""
    from heron.cluster.rendezvous import open_listener
    from heron.weights.broadcast import WeightBroadcastGroup

    address = open_listener()
    joining = threading.Thread(target=vllm_engine.join_weight_group, args=(*address, 1, 2, 120.0, 0))
    joining.start()
    sender = WeightBroadcastGroup(*address, 0, 2, 120.0, bucket_bytes=64 << 10)
    joining.join()
    original = load_file(str(toy_model_dir / "model.safetensors"))
    greedy = [GenerationRequest(p, SamplingParams(max_new_tokens=12, greedy=True)) for p in [*PROMPTS, LONG_PROMPT]]
    before = vllm_engine.generate(greedy)
    g = torch.Generator().manual_seed(3)
    pushed = {k: (v + 0.05 * torch.randn(v.shape, generator=g)).contiguous() for k, v in original.items()}
    try:
        assert len(buckets(pushed, 64 << 10)) > 3
        _broadcast_push(vllm_engine, sender, pushed, 7)
        reference.load_weights(_handle(pushed, 7))
        assert vllm_engine.policy_version == 7
        ours, expected = vllm_engine.generate(greedy), reference.generate(greedy)
        assert all(gen.policy_version == 7 for gen in ours)
        for prompt, gen, ref_gen in zip([*PROMPTS, LONG_PROMPT], ours, expected):
            _assert_same_greedy(gen, ref_gen, reference.model, prompt, config)
        assert [g_.tokens for g_ in ours] != [b.tokens for b in before]

        bad = dict(pushed, **{"model.norm.weight": torch.zeros(3)})
        with pytest.raises(ValueError, match="shape mismatch for 'model.norm.weight'"):
            _broadcast_push(vllm_engine, sender, bad, 8)
        assert vllm_engine.policy_version == 7
        assert [g_.tokens for g_ in vllm_engine.generate(greedy)] == [g_.tokens for g_ in ours]
    finally:
        vllm_engine.load_weights(_handle(original, 0))  # through a file: the module's engine as it was
    assert [g_.tokens for g_ in vllm_engine.generate(greedy)] == [b.tokens for b in before]


def _broadcast_push(engine, sender, state: dict[str, torch.Tensor], version: int) -> None:
    """Rank 0's send on a thread while the engine loads; the send must complete either way."""
    from heron.weights.broadcast import Broadcast

    errors = []
    sending = threading.Thread(target=lambda: _capture(errors, sender.send, state, version))
    sending.start()
    try:
        engine.load_weights(WeightHandle(version, Broadcast()))
    finally:
        sending.join(timeout=120)
        assert not sending.is_alive() and not errors, errors


def _capture(errors: list, fn, *args) -> None:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - reported by the caller
        errors.append(repr(error))


def test_a_disk_push_is_loaded_from_the_transports_own_file(vllm_engine, reference, toy_model_dir, config, tmp_path):
    """cluster.weight_transport=disk: the server reloads the file the trainer wrote (no second
    copy read and written by the engine) when it fits under the checkpoint's names; a file that
    needs a rename (the tied head's alias) goes through the engine's own copy; a misfit changes
    nothing."""
    prompts = [*PROMPTS, LONG_PROMPT]
    greedy = [GenerationRequest(p, SamplingParams(max_new_tokens=12, greedy=True)) for p in prompts]
    original = load_file(str(toy_model_dir / "model.safetensors"))
    g = torch.Generator().manual_seed(5)
    pushed = {k: (v + 0.05 * torch.randn(v.shape, generator=g)).contiguous() for k, v in original.items()}
    transport = tmp_path / "transport"
    own_copies = lambda: sorted(p.name for p in vllm_engine.weight_dir.glob("*.safetensors"))  # noqa: E731
    try:
        before = own_copies()
        handle = WeightHandle(5, SafetensorsFile.write_version(pushed, transport, 5))
        vllm_engine.load_weights(handle)
        reference.load_weights(handle)
        assert vllm_engine.policy_version == 5 and own_copies() == before  # the transport's file, read in place
        expected = reference.generate(greedy)
        for prompt, gen, ref_gen in zip(prompts, vllm_engine.generate(greedy), expected):
            _assert_same_greedy(gen, ref_gen, reference.model, prompt, config)

        aliased = {("lm_head.weight" if k == "model.embed_tokens.weight" else k): v for k, v in pushed.items()}
        vllm_engine.load_weights(WeightHandle(6, SafetensorsFile.write_version(aliased, transport, 6)))
        assert vllm_engine.policy_version == 6 and "weights-v000006.safetensors" in own_copies()  # renamed in a copy
        for prompt, gen, ref_gen in zip(prompts, vllm_engine.generate(greedy), expected):
            _assert_same_greedy(gen, ref_gen, reference.model, prompt, config)

        bad = dict(pushed, **{"model.norm.weight": torch.zeros(3)})
        with pytest.raises(ValueError, match="shape mismatch for 'model.norm.weight'"):
            vllm_engine.load_weights(WeightHandle(7, SafetensorsFile.write_version(bad, transport, 7)))
        assert vllm_engine.policy_version == 6
    finally:
        vllm_engine.load_weights(_handle(original, 0))
