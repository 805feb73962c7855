"""The lean decode step (heron.rollout.lean_decoder) against the HF forward it replaces.

With torch's own linears (``decoder="lean"``) both run the same operations in the same order on
the same parameters (rule 1 of tests/tolerance.py): the engine's tokens and logprobs must be
bit-identical with ``decoder="lean"`` and ``decoder="hf"``, for every architecture the step knows,
in float32 and bfloat16, on GRPO-shaped batches (left padding, stop tokens, per-row lengths,
greedy, top-p). The models get random norm weights and biases, so a step that skipped or
reordered any of them would show; every model is saved and loaded back with ``from_pretrained``,
as a user's would be.

The default (``decoder="auto"``) packs the linears' weights for oneDNN on the CPU where that pays
(bfloat16, and float32 weights from ``heron.device.float32_packing_floor()``, which depends on
the CPU's vendor; the tests of the packed path set that floor to 0, so these small models pack,
and those of the floor set it): each linear is the same dot products summed in another order.
``packed_linear`` is checked against a float64 reference within the bound of its accumulation
(rule 2) and its bf16 output rounding; the float32 engine's logprobs within the derived bound and
its tokens exactly (rule 4).
"""

from __future__ import annotations

import pytest
import torch

import math

import heron.device
from heron.device import packed_linear, packed_linear_weight, packs_linear
from heron.records import GenerationRequest, SamplingParams
from heron.rollout import EmbeddedEngine
from heron.rollout.lean_decoder import float32_decode_attention, unsupported_reason
from tests.tolerance import U_BF16, assert_logprobs_close, gamma, reduction_length

VOCAB, PAD = 96, 0
PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23, 24], [30, 31]]
STOP = tuple(range(1, 7))


def _config(kind: str):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=PAD, bos_token_id=None, eos_token_id=1,
        tie_word_embeddings=False,
    )
    if kind == "qwen3":
        return Qwen3Config(**common, head_dim=16)
    if kind == "qwen2":
        return Qwen2Config(**common)
    if kind == "llama-bias":
        return LlamaConfig(**common, attention_bias=True, mlp_bias=True)
    if kind == "llama3-rope":
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
        return LlamaConfig(**common, rope_parameters=rope)
    raise ValueError(kind)


def _model_dir(tmp_path_factory, kind: str):
    """A random model of ``kind``, every parameter (norm weights and biases too) drawn from a
    normal wide enough that the next-token distributions are far from uniform."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(kind))
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(1 + 0.3 * torch.randn_like(param) if "norm" in name else 0.3 * torch.randn_like(param))
    folder = tmp_path_factory.mktemp(kind)
    model.save_pretrained(folder)
    return folder


ARCHITECTURES = ["qwen3", "qwen2", "llama-bias", "llama3-rope"]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def model_dir(request, tmp_path_factory):
    return _model_dir(tmp_path_factory, request.param)


def _requests() -> list[GenerationRequest]:
    requests = []
    for k, prompt in enumerate(PROMPTS):
        for i in range(4):
            params = SamplingParams(
                max_new_tokens=20 if i % 3 else 6, temperature=0.8 if k % 2 else 1.0, top_p=0.9 if k == 1 else 1.0,
                stop_token_ids=STOP if i != 1 else (), seed=100 * k + i, greedy=k == 4 and i == 0,
            )
            requests.append(GenerationRequest(prompt, params))
    return requests


@pytest.fixture
def pack_every_linear(monkeypatch):
    """float32 linears of any size packed, so these small models take the packed path."""
    monkeypatch.setattr(heron.device, "float32_packing_floor", lambda: 0)


@pytest.fixture
def intel_floor(monkeypatch):
    """The float32 packing floor of an Intel CPU, whatever this machine's vendor."""
    monkeypatch.setattr(heron.device, "cpu_vendor", lambda: "GenuineIntel")


def _engines(model_dir, dtype, decoder="lean"):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval().requires_grad_(False)
    lean = EmbeddedEngine(model, pad_token_id=PAD, decoder=decoder)
    hf = EmbeddedEngine(model, pad_token_id=PAD, decoder="hf")
    return lean, hf


@pytest.mark.portability
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_lean_decoding_is_bit_identical_to_the_hf_forward(model_dir, dtype):
    lean, hf = _engines(model_dir, dtype)
    assert (lean.decoder, hf.decoder) == ("lean", "hf"), lean.decoder_reason
    requests = _requests()
    expected, actual = hf.generate(requests), lean.generate(requests)
    assert len({len(g.tokens) for g in expected}) >= 4 and {g.finish_reason for g in expected} == {"stop", "length"}
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.logprobs for g in actual] == [g.logprobs for g in expected]
    assert [g.finish_reason for g in actual] == [g.finish_reason for g in expected]


@pytest.mark.portability
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_unpadded_batches_are_bit_identical_too(model_dir, dtype):
    """Prompts of one length: no key is ever padding, so transformers gives SDPA no mask, and so
    does the lean step."""
    lean, hf = _engines(model_dir, dtype)
    expected, actual = hf.generate(_unpadded_requests()), lean.generate(_unpadded_requests())
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.logprobs for g in actual] == [g.logprobs for g in expected]


def _unpadded_requests() -> list[GenerationRequest]:
    return [GenerationRequest([5 + k, 6, 7 + k, 8], SamplingParams(max_new_tokens=24, seed=k)) for k in range(12)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("decoder", ["auto", "lean"])
def test_auto_runs_cpu_bf16_decode_attention_in_float32(tmp_path_factory, dtype, decoder, monkeypatch):
    """decoder="auto" runs a bf16 step's attention in float32 on the CPU (the faster arithmetic
    there, heron.device.decode_attention_in_float32) with ``float32_decode_attention`` and never
    calls transformers' SDPA function for it; decoder="lean", and float32 models, call that function
    as transformers does, in the model's dtype. The values are bounded below
    (``test_bf16_and_float32_decode_attention_are_attention_up_to_round_off``)."""
    import heron.rollout.lean_decoder as lean_decoder
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    engine, _ = _engines(_model_dir(tmp_path_factory, "qwen3"), dtype, decoder=decoder)
    seen, float32_calls = [], []

    def attention(module, q, k, v, mask, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype))
        return sdpa_attention_forward(module, q, k, v, mask, **kwargs)

    def in_float32(q, keys, values, mask, scaling):
        float32_calls.append((q.dtype, keys.dtype, mask is None))
        return float32_attention(q, keys, values, mask, scaling)

    float32_attention = lean_decoder.float32_decode_attention
    monkeypatch.setattr(lean_decoder, "float32_decode_attention", in_float32)
    engine._lean.attention = attention
    generations = engine.generate(_requests()) + engine.generate(_unpadded_requests())  # padded, then not
    if decoder == "auto" and dtype == torch.bfloat16:
        assert not seen and {c[:2] for c in float32_calls} == {(dtype, dtype)}
        assert {c[2] for c in float32_calls} == {True, False}  # padded batches and unpadded ones
    else:
        assert not float32_calls and seen and set(seen) == {(dtype,) * 3}
    assert all(math.isfinite(lp) for g in generations for lp in g.logprobs)


@pytest.mark.parametrize("kind", ["qwen3", "llama-bias", "mixed-bias"])
def test_auto_projects_q_k_v_and_gate_up_with_one_kernel_call_each(tmp_path_factory, kind, pack_every_linear):
    """decoder="auto" stacks each layer's q, k, v weights (and biases) into one packed weight and
    its gate and up ones into another: per step and layer 4 packed-linear calls (qkv, o, gate-up,
    down) instead of 7, plus the head. A group whose linears do not all carry a bias (here k_proj's
    removed) is packed linear by linear. Tokens within the summation-order bound of the HF
    forward's are checked for every architecture above; here the step's tokens equal HF's."""
    import heron.rollout.lean_decoder as lean_module

    engine, hf = _engines(_model_dir(tmp_path_factory, "llama-bias" if kind == "mixed-bias" else kind), torch.float32,
                          decoder="auto")
    if kind == "mixed-bias":
        for model in {id(e.model): e.model for e in (engine, hf)}.values():
            for layer in model.model.layers:
                layer.self_attn.k_proj.bias = None
    session = engine._lean.session(32, 4)
    if not session.packed:
        pytest.skip("no packed linear kernel in this torch build (the step uses F.linear)")
    calls = []
    real = lean_module.packed_linear

    def counting(x, weight, bias):
        calls.append(weight)
        return real(x, weight, bias)

    lean_module.packed_linear = counting
    try:
        request = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=3, seed=1))
        [actual] = engine.generate([request])
    finally:
        lean_module.packed_linear = real
    layers = engine.model.config.num_hidden_layers
    per_layer = 6 if kind == "mixed-bias" else 4
    assert len(calls) == 2 * (per_layer * layers + 1)  # two decode steps (the third token needs none)
    [expected] = hf.generate([request])
    assert actual.tokens == expected.tokens


@pytest.mark.portability
def test_bf16_and_float32_decode_attention_are_attention_up_to_round_off():
    """transformers' SDPA call on bf16 decode shapes (one query per row, grouped key/value heads,
    without a mask and with padding), in bf16 as transformers calls it, on float32 copies, and
    ``float32_decode_attention`` as decoder="auto" runs it on the CPU (two float32 matmuls around
    a float32 softmax: the same error terms as the copies'): each output within the float64
    attention's bound. Scores q.k
    carry gamma(D) sum_d |q_d k_d| (float32 accumulation of exact bf16 products), which moves
    each softmax weight by a relative 2 max_j |ds_j| to first order; the weighted sum adds
    gamma(n) (and a few float32 ulps for exp); torch's CPU flash kernel in bf16 also rounds the
    weights to bf16 for that product (u_bf16 each, the float32 copies do not), so

        |out - exact| <= (2 max_j |ds_j| + gamma(n + 8) [+ u_bf16]) sum_j p_j |v_j| + u_bf16 |exact|,

    the last term the output's rounding to bf16."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Attention:
        num_key_value_groups, is_causal, training = 2, True, False

    torch.manual_seed(0)
    rows, heads, kv_heads, dim = 32, 8, 4, 64
    scale = dim**-0.5
    for n in (1, 7, 25, 40, 77):
        q = torch.randn(rows, heads, 1, dim).bfloat16()
        k, v = torch.randn(rows, kv_heads, n, dim).bfloat16(), torch.randn(rows, kv_heads, n, dim).bfloat16()
        padded = torch.ones(rows, 1, 1, n, dtype=torch.bool)
        padded[::3, :, :, : n // 2] = False  # a third of the rows left-padded
        for mask in (None, padded):
            keep = torch.ones(rows, 1, 1, n, dtype=torch.bool) if mask is None else mask
            qd = q.double().view(rows, kv_heads, 2, dim)  # [R, kv_heads, 2, D]: the heads of a key/value head
            kd, vd = k.double().unsqueeze(2), v.double().unsqueeze(2)  # [R, kv_heads, 1, n, D]
            products = qd.unsqueeze(3) * kd * scale  # [R, kv_heads, 2, n, D]
            p = products.sum(-1).masked_fill(~keep.view(rows, 1, 1, n), float("-inf")).softmax(-1)  # [R, kv_heads, 2, n]
            exact = (p.unsqueeze(-1) * vd).sum(-2).reshape(rows, heads, dim)  # [R, heads, D]
            score_error = gamma(dim) * products.abs().sum(-1).amax(-1, keepdim=True)  # [R, kv_heads, 2, 1]
            spread = (p.unsqueeze(-1) * vd.abs()).sum(-2)  # [R, kv_heads, 2, D]
            for name, weights_rounding, out in [
                ("bf16", U_BF16, sdpa_attention_forward(Attention, q, k, v, mask, dropout=0.0, scaling=scale)[0]),
                ("float32 copies", 0.0, sdpa_attention_forward(Attention, q.float(), k.float(), v.float(), mask, dropout=0.0,
                                                              scaling=scale)[0].bfloat16()),
                ("float32 matmuls", 0.0, float32_decode_attention(q, k, v, mask, scale)),
            ]:
                bound = ((2 * score_error + gamma(n + 8) + weights_rounding) * spread).reshape(rows, heads, dim)
                bound = bound + U_BF16 * exact.abs()
                excess = ((out.double().reshape(rows, heads, dim) - exact).abs() - bound).max().item()
                assert excess <= 0, (name, n, mask is None, excess)


def _assert_within_summation_order(auto: EmbeddedEngine, hf: EmbeddedEngine) -> None:
    """On _requests(): tokens exactly the HF forward's, logprobs within 2 gamma(n) (|lp| + log V)
    (tests/tolerance.py rules 2 and 4)."""
    requests = _requests()
    expected, actual = hf.generate(requests), auto.generate(requests)
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    config = auto.model.config
    n = reduction_length(config, tokens=len(requests) * config.max_position_embeddings)
    flat = lambda gens: [lp for g in gens for lp in g.logprobs]  # noqa: E731
    assert_logprobs_close(flat(actual), flat(expected), n=n, log_vocab=math.log(config.vocab_size))


@pytest.mark.portability
def test_packed_linears_decode_within_the_summation_order_bound(model_dir, pack_every_linear):
    """decoder="auto" (float32): tokens exactly the HF forward's, logprobs within
    2 gamma(n) (|lp| + log V) (tests/tolerance.py rules 2 and 4)."""
    auto, hf = _engines(model_dir, torch.float32, decoder="auto")
    _assert_within_summation_order(auto, hf)


@pytest.mark.portability
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_packed_linear_is_the_linear_up_to_round_off(dtype, pack_every_linear):
    """One weight packed for 32 rows, used for every row count the decode loop shrinks to: each
    output within its accumulation bound gamma(K) sum_k |x_k w_k| of the float64 product (both
    kernels accumulate in float32), plus the rounding of the output to ``dtype``."""
    torch.manual_seed(0)
    in_features, out_features = 512, 384
    weight, bias = torch.randn(out_features, in_features).to(dtype), torch.randn(out_features).to(dtype)
    packed = packed_linear_weight(weight, 32)
    if packed is None:  # oneDNN has no bf16 kernel on this CPU (e.g. AVX2 only): the step keeps F.linear
        assert dtype == torch.bfloat16, "float32 packing is declined on a CPU torch with oneDNN"
        return
    rounding = 0.0 if dtype == torch.float32 else U_BF16
    for rows in (32, 17, 16, 5, 1):
        x = torch.randn(rows, 1, in_features).to(dtype)
        exact = x.double() @ weight.double().T + bias.double()  # [rows, 1, out]
        scale = x.double().abs() @ weight.double().abs().T + bias.double().abs()
        bound = gamma(in_features + 1) * scale * (1 + rounding) + rounding * exact.abs()
        for name, out in [("packed", packed_linear(x, packed, bias)), ("torch", torch.nn.functional.linear(x, weight, bias))]:
            assert out.dtype == dtype and out.shape == exact.shape
            excess = ((out.double() - exact).abs() - bound).max().item()
            assert excess <= 0, (name, rows, excess)


def test_float32_weights_pack_from_the_floor_and_bfloat16_ones_always(intel_floor):
    """packs_linear on an Intel CPU: a float32 weight below PACKED_FLOAT32_MIN_ELEMENTS stays
    plain (MKL's sgemm is the faster kernel there), one at the floor packs, bfloat16 ones pack at
    any size where the CPU has native bf16 (none where it emulates it: oneDNN refused to pack them
    on an AVX2 CPU); a group's size (stacked q, k, v) is what counts when given."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("a torch build without oneDNN packs nothing")
    floor = heron.device.PACKED_FLOAT32_MIN_ELEMENTS
    small, large = torch.randn(256, 256), torch.randn(floor // 512, 512)
    assert heron.device.float32_packing_floor() == floor
    assert not packs_linear(small) and packed_linear_weight(small, 32) is None
    assert packs_linear(large) and packs_linear(small, elements=floor)
    assert packs_linear(small.bfloat16()) == heron.device.native_bf16("cpu")
    assert packs_linear(small.bfloat16()) == (packed_linear_weight(small.bfloat16(), 32) is not None)


def test_an_amd_cpu_packs_float32_weights_of_any_size(monkeypatch):
    """MKL's sgemm does not run its own best code on AMD CPUs; oneDNN's packed kernel was the
    faster one at every decode shape measured there, so there is no floor."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("a torch build without oneDNN packs nothing")
    monkeypatch.setattr(heron.device, "cpu_vendor", lambda: "AuthenticAMD")
    assert heron.device.float32_packing_floor() == 0
    assert packs_linear(torch.randn(4, 4)) and packed_linear_weight(torch.randn(4, 4), 32) is not None


def test_the_cpu_vendor_is_read_from_cpuinfo_or_the_processor_name():
    """/proc/cpuinfo's vendor_id line (Linux), else a vendor named in platform.processor()
    (Windows: "AMD64 Family 23 Model 49 Stepping 0, AuthenticAMD"); "" where neither says, and
    an unknown vendor keeps the floor."""
    parse = heron.device.parse_cpu_vendor
    assert parse("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n") == "AuthenticAMD"
    assert parse("processor\t: 0\nvendor_id\t: GenuineIntel\n") == "GenuineIntel"
    assert parse("AMD64 Family 23 Model 49 Stepping 0, AuthenticAMD") == "AuthenticAMD"
    assert parse("Intel64 Family 6 Model 85 Stepping 7, GenuineIntel") == "GenuineIntel"
    assert parse("arm") == parse("") == ""
    assert isinstance(heron.device.cpu_vendor(), str)


@pytest.mark.portability
def test_a_float32_model_below_the_floor_decodes_bit_identical_with_auto(tmp_path_factory, intel_floor):
    """With an Intel CPU's floor these small float32 models pack nothing: decoder="auto" is then
    the lean step with torch's linears, bit-identical to the HF forward (the bench's 3.2 M model,
    all of whose weights lie below the floor, decodes this way on an Intel CPU)."""
    auto, hf = _engines(_model_dir(tmp_path_factory, "qwen3"), torch.float32, decoder="auto")
    assert auto._lean.session(32, 4).packed == {}
    requests = _requests()
    expected, actual = hf.generate(requests), auto.generate(requests)
    assert [(g.tokens, g.logprobs) for g in actual] == [(g.tokens, g.logprobs) for g in expected]


@pytest.mark.portability
def test_a_step_mixes_packed_and_plain_linears(tmp_path_factory, monkeypatch):
    """A floor between the groups' sizes packs the large ones only (here each layer's stacked gate
    and up, 2 x 96 x 64 elements) and leaves q, k, v, o, down and the head to F.linear, in one
    step: one packed call per layer and step, tokens the HF forward's, logprobs within the
    summation-order bound."""
    import heron.rollout.lean_decoder as lean_module

    if not torch.backends.mkldnn.is_available():
        pytest.skip("a torch build without oneDNN packs nothing")
    monkeypatch.setattr(heron.device, "float32_packing_floor", lambda: 2 * 96 * 64)
    auto, hf = _engines(_model_dir(tmp_path_factory, "qwen3"), torch.float32, decoder="auto")
    layers = auto.model.model.layers
    assert set(auto._lean.session(32, 4).packed) == {(layer.mlp.gate_proj, layer.mlp.up_proj) for layer in layers}
    calls = []
    real = lean_module.packed_linear
    monkeypatch.setattr(lean_module, "packed_linear", lambda x, w, b: calls.append(w) or real(x, w, b))
    request = GenerationRequest(PROMPTS[0], SamplingParams(max_new_tokens=3, seed=1))
    [actual] = auto.generate([request])
    assert len(calls) == 2 * len(layers)  # two decode steps, one packed call per layer
    _assert_within_summation_order(auto, hf)


def test_packing_is_declined_where_there_is_no_packed_kernel():
    assert packed_linear_weight(torch.randn(8, 8, dtype=torch.float64), 4) is None
    assert packed_linear_weight(torch.randn(8, 8, dtype=torch.float16), 4) is None
    assert packed_linear_weight(torch.randn(8, 8, device="meta"), 4) is None


def test_a_forward_hook_sends_the_batch_to_the_hf_forward(tmp_path_factory):
    """Hooks keep firing: a batch whose model carries a forward hook decodes with the HF forward
    (the residency layer's sleep guard is such a hook), and gives the same result."""
    lean, hf = _engines(_model_dir(tmp_path_factory, "qwen3"), torch.float32)
    requests = _requests()[:4]
    expected = hf.generate(requests)
    calls = []
    handle = lean.model.model.layers[1].mlp.register_forward_hook(lambda *args: calls.append(1))
    try:
        actual = lean.generate(requests)
    finally:
        handle.remove()
    steps = max(len(g.tokens) for g in expected)
    assert len(calls) == steps  # the prefill and every decode step but the last ran the hooked module
    assert [g.tokens for g in actual] == [g.tokens for g in expected]
    assert [g.logprobs for g in actual] == [g.logprobs for g in expected]


def _unsupported(tmp_path_factory, change) -> str | None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3")).eval()
    change(model)
    return unsupported_reason(model)


def test_models_the_step_does_not_know_decode_with_the_hf_forward(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2)).eval()
    assert "model type 'gpt2'" in unsupported_reason(gpt2)
    engine = EmbeddedEngine(gpt2, pad_token_id=PAD)
    assert engine.decoder == "hf" and "gpt2" in engine.decoder_reason
    assert len(engine.generate(_requests()[:2])[0].tokens) > 0

    def eager(model):
        model.config._attn_implementation = "eager"

    def sliding(model):
        model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers

    def dynamic_rope(model):
        model.model.rotary_emb.rope_type = "dynamic"

    def wrapped_linear(model):
        model.model.layers[0].mlp.up_proj = torch.nn.Sequential(model.model.layers[0].mlp.up_proj)

    def gelu(model):
        model.config.hidden_act = "gelu"

    assert "attention implementation 'eager'" in _unsupported(tmp_path_factory, eager)
    assert "sliding-window" in _unsupported(tmp_path_factory, sliding)
    assert "RoPE type 'dynamic'" in _unsupported(tmp_path_factory, dynamic_rope)
    assert "layers.0.mlp.up_proj is a Sequential" in _unsupported(tmp_path_factory, wrapped_linear)
    assert "activation 'gelu'" in _unsupported(tmp_path_factory, gelu)
    assert _unsupported(tmp_path_factory, lambda model: None) is None


def test_decoder_must_be_auto_or_hf(tmp_path_factory):
    lean, _ = _engines(_model_dir(tmp_path_factory, "qwen2"), torch.float32)
    with pytest.raises(ValueError, match="decoder must be one of"):
        EmbeddedEngine(lean.model, pad_token_id=PAD, decoder="fast")
    assert EmbeddedEngine(lean.model, pad_token_id=PAD).decoder == "lean"  # auto: the lean step, packed
