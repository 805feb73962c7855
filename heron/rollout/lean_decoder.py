"""The embedded engine's decode step for Llama-family models, without transformers' per-call
machinery (issue 14.4).

Why: one decode step feeds one token per row, so the model's matmuls are small and what
transformers does around them every token weighs: building the attention mask, recomputing the
RoPE cos/sin, output capturing, kwarg deprecation shims and module-call wrappers. Measured on
this project's 2-core CPU machine (3.2 M-parameter Qwen3, 32 rows, float32): the HF forward took
~5.7-7.7 ms a step, of which the linear layers ~2.6 ms; this step 4.4-5.2 ms (bench/engine.py
has the side-by-side figure for the whole engine).

What it computes is the HF forward's own arithmetic, operation for operation, on the model's
own parameters (read at each step, so weight pushes and residency need nothing extra). With
``R`` rows, ``H`` hidden size and ``x`` [R, 1, H] the embedding of each row's newest token, per
decoder layer:

    h       = rmsnorm(x)                       rmsnorm(z) = w * (z / sqrt(mean(z^2) + eps))
    q, k, v = W_q h + b_q, W_k h + b_k, W_v h + b_v       (biases: Qwen2, Llama attention_bias)
    q, k    = rmsnorm_head(q), rmsnorm_head(k)            (Qwen3 only: per head, before RoPE)
    q, k    = q cos(p) + rot(q) sin(p), k cos(p) + rot(k) sin(p)     (p: the row's position)
    x       = x + W_o sdpa(q, K[:n], V[:n], padding mask)   (k, v appended to the cache first)
    x       = x + W_down (silu(W_gate rmsnorm(x)) * W_up rmsnorm(x))
and logits = W_head rmsnorm(x). Attention is transformers' own SDPA function, called with the
mask transformers would build (None when no column of any row is padding), so the kernel and
its GQA handling are the same; the RMSNorm is written as transformers writes it (a fused
``F.rms_norm`` rounds bf16 differently). ``tests/unit/test_lean_decoder.py`` checks tokens and
logprobs against the HF forward for Llama, Qwen2 and Qwen3 models, in float32 and bfloat16.
That is ``decoder="lean"``; the default ``auto`` (``fast_kernels``) also swaps in faster kernels
for the same products: oneDNN-packed linears on the CPU (another summation order), with each
layer's q, k, v projections stacked into one weight and its gate and up projections into another
(one kernel call where there were three and two: every output is still its own dot product), and
in CPU bf16 attention on float32 copies of q, k, v (torch's bf16 flash kernel is the slow one
there; float32 also skips rounding the softmax weights to bf16), as two batched matmuls around a
softmax (``float32_decode_attention``: faster than SDPA's float32 flash kernel on long decodes,
the same attention summed in another order).

Which models: ``unsupported_reason`` names why a model is not taken (another model type,
sliding-window layers, a RoPE that changes its frequencies with the sequence length, adapters or
other modules in place of the plain linears, an attention implementation other than sdpa); the
engine then decodes with the HF forward. A batch also goes to the HF forward when the model is
in training mode or any module carries a forward hook (a user's, or the residency layer's sleep
guard), so hooks keep firing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from heron.device import decode_attention_in_float32, packed_linear, packed_linear_weight, packs_linear

MODEL_TYPES = ("llama", "qwen2", "qwen3")
QK_NORM_TYPES = ("qwen3",)  # RMSNorm of each query and key head before RoPE
DYNAMIC_ROPE = ("dynamic", "longrope")  # transformers' dynamic_rope_update recomputes these per forward

DecodeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], torch.Tensor]


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when ``LeanDecoder`` computes ``model``'s decode step, else why not (one phrase)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_TYPES:
        return f"model type {model_type!r} (the lean decode step knows {', '.join(MODEL_TYPES)})"
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"attention implementation {config._attn_implementation!r} (needs sdpa)"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return "sliding-window layers"
    if getattr(config, "hidden_act", None) != "silu":
        return f"activation {config.hidden_act!r} (needs silu)"
    rope_type = getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "rope_type", None)
    if not isinstance(rope_type, str) or any(kind in rope_type for kind in DYNAMIC_ROPE):
        return f"RoPE type {rope_type!r} (needs frequencies fixed at load time)"
    try:
        _check_modules(model)
    except (AttributeError, TypeError) as err:
        return str(err)
    return None


def _check_modules(model: torch.nn.Module) -> None:
    """Raises TypeError/AttributeError unless every module the step reads is the plain kind."""
    def plain(module, kind, name):
        if type(module) is not kind:
            raise TypeError(f"{name} is a {type(module).__name__}, not a plain {kind.__name__}")

    plain(model.lm_head, torch.nn.Linear, "lm_head")
    plain(model.model.embed_tokens, torch.nn.Embedding, "embed_tokens")
    norms = [model.model.norm]
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            plain(getattr(attn, name), torch.nn.Linear, f"layers.{i}.self_attn.{name}")
        for name in ("gate_proj", "up_proj", "down_proj"):
            plain(getattr(mlp, name), torch.nn.Linear, f"layers.{i}.mlp.{name}")
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
        if model.config.model_type in QK_NORM_TYPES:
            norms += [attn.q_norm, attn.k_norm]
            if attn.q_norm.variance_epsilon != attn.k_norm.variance_epsilon:
                raise TypeError(f"layers.{i}: q_norm and k_norm have different epsilons")
    for norm in norms:
        if not type(norm).__name__.endswith("RMSNorm") or not isinstance(getattr(norm, "variance_epsilon", None), float):
            raise TypeError(f"{type(norm).__name__} is not a transformers RMSNorm")


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm (Llama, Qwen2, Qwen3), written out: statistics in float32, ``weight``
    applied after the cast back to the input dtype. The same operations on the same values, in
    place on the fresh float32 copy where the input is not float32 (no two temporaries a call)."""
    h = x.to(torch.float32)
    scale = h.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()  # [..., 1]
    h = h.mul_(scale) if h is not x else h * scale
    return weight * h.to(x.dtype)


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin [N, D] with its first half negated: rotate_half(x) sin = cat(x2, x1) signed_sin, since
    (-a) b and a (-b) round alike (negation is exact), so the step skips a negation per layer."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin; x [R, heads, 1, D], cos/signed_sin [R, 1, 1, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((x.narrow(-1, half, half), x.narrow(-1, 0, half)), dim=-1) * signed_sin


def float32_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                             scaling: float) -> torch.Tensor:
    """softmax(q k^T scaling, masked) v for one query per row, in float32 on float32 copies, as two
    batched matmuls around a softmax; each key/value head's query heads are the rows of its
    product (transformers' layout for a single query, so no key or value is repeated).

    q [R, heads, 1, D], keys / values [R, kv_heads, n, D], mask None or bool [R, 1, 1, n] (True:
    attend) -> [R, 1, heads, D] in q's dtype (transformers' attention output layout).

    Why not SDPA's float32 flash kernel on the copies: on long decodes the two products are faster.
    Measured on a 2-core AMD EPYC, whole bf16 engine, 32 rows, the two alternated: 0.87x the time at
    512 new tokens (3.2 M bench model) and 0.90x at 256 (25 M); at 32-64 tokens, where a row
    attends few keys, 1.00x (0.997-1.02x). (float32 models keep SDPA on their cache: 0.98-1.00x
    there.) The same sums in another order (bounded in tests/unit/test_lean_decoder.py)."""
    rows, heads, _, dim = q.shape
    kv_heads = keys.shape[1]
    grouped = q.float().view(rows, kv_heads, heads // kv_heads, dim)  # [R, kv_heads, group, D]
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2)).mul_(scaling)  # [R, kv_heads, group, n]
    if mask is not None:
        scores.masked_fill_(mask.logical_not(), float("-inf"))
    out = torch.matmul(scores.softmax(dim=-1), values.float())  # [R, kv_heads, group, D]
    return out.view(rows, heads, 1, dim).transpose(1, 2).to(q.dtype)  # [R, 1, heads, D]


Packed = tuple[torch.Tensor, "torch.Tensor | None", list[int]]  # weight, bias, each linear's outputs


def _pack(linears: tuple[torch.nn.Linear, ...], rows: int) -> Packed | None:
    """``linears``' weights stacked along their outputs [sum N, K] and packed for ``rows`` rows,
    with their biases likewise (all or none carry one); None where there is no packed kernel or it
    does not pay (``heron.device.packs_linear``)."""
    if not packs_linear(linears[0].weight, sum(linear.weight.numel() for linear in linears)):
        return None
    weight = packed_linear_weight(_stacked([linear.weight for linear in linears]), rows)
    if weight is None:
        return None
    bias = None if linears[0].bias is None else _stacked([linear.bias for linear in linears])
    return weight, bias, [linear.out_features for linear in linears]


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``tensors`` joined along dim 0; a single one as it is (no copy)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _has_hooks(model: torch.nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()) or bool(
        torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks
    )


class LeanDecoder:
    """Builds the decode step of one supported model (``unsupported_reason(model) is None``).
    ``fast_kernels``: kernels that compute the same dot products summed in another order. On the
    CPU, the step's linears use weights packed for oneDNN once per batch where that pays
    (``heron.device.packs_linear``: bfloat16, and float32 ones on AMD CPUs or from 2 MB; q, k, v
    and gate, up stacked), and in bf16 attention runs on float32 copies
    (``heron.device.decode_attention_in_float32``). Off: torch's own ``F.linear`` and
    transformers' attention call as it is, bit for bit the HF forward."""

    def __init__(self, model: torch.nn.Module, *, fast_kernels: bool = True):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"LeanDecoder: unsupported model: {reason}")
        self.model = model
        self.fast_kernels = fast_kernels
        self.attention = sdpa_attention_forward
        self._qk_norm = model.config.model_type in QK_NORM_TYPES

    def session(self, num_positions: int, rows: int) -> DecodeStep | None:
        """The decode step for one batch of ``rows`` rows whose positions stay below
        ``num_positions``, or None when this batch must use the HF forward (the model is in
        training mode, or a module carries a forward hook). What it holds (the RoPE table, packed weights) lives as long as the batch,
        like the KV cache."""
        if _has_hooks(self.model) or self.model.training:
            return None
        embed = self.model.model.embed_tokens.weight
        positions = torch.arange(num_positions, device=embed.device).unsqueeze(0)  # [1, N]
        cos, sin = self.model.model.rotary_emb(embed[:1].unsqueeze(0), positions)  # [1, N, D] each
        packed = self._packed_weights(rows) if self.fast_kernels else {}
        layers = [_layer_plan(layer, self.model.config, qk_weight, packed)
                  for layer, qk_weight in zip(self.model.model.layers, self._qk_norm_weights(), strict=True)]
        return _Step(self, cos[0], _signed_sin(sin[0]), layers, packed)

    def _packed_weights(self, rows: int) -> dict[tuple[torch.nn.Linear, ...], Packed]:
        """The step's linears packed for ``rows`` rows: each layer's (q, k, v) and (gate, up)
        projections stacked into one weight each (alone where only some of them carry a bias),
        every other linear by itself; a group without a packed kernel, or too small for one to pay,
        is left out (its linears run ``F.linear``)."""
        groups: list[tuple[torch.nn.Linear, ...]] = []
        for layer in self.model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for group in ((attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj)):
                if len({linear.bias is None for linear in group}) == 1:
                    groups.append(group)
        fused = {linear for group in groups for linear in group}
        groups += [(m,) for m in self.model.modules() if type(m) is torch.nn.Linear and m not in fused]
        packed = {}
        for group in groups:
            entry = _pack(group, rows)
            if entry is not None:  # else no packed kernel here, or one that does not pay: F.linear
                packed[group] = entry
        return packed

    def _qk_norm_weights(self) -> list[torch.Tensor | None]:
        """Per layer, q_norm's weight repeated for every query head then k_norm's for every key
        head [heads + kv_heads, D], so one RMSNorm covers a step's queries and keys (the same
        per-row arithmetic as two); None per layer for models without the norms."""
        config, layers = self.model.config, self.model.model.layers
        if not self._qk_norm:
            return [None] * len(layers)
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        return [torch.cat([a.q_norm.weight.expand(heads, -1), a.k_norm.weight.expand(kv_heads, -1)])
                for a in (layer.self_attn for layer in layers)]


class _Projection:
    """One or more linears applied to the same input, resolved once per batch: their stacked
    packed weight (one kernel call), or each linear by itself (packed, or torch's ``F.linear``)."""

    __slots__ = ("stacked", "parts")

    def __init__(self, linears: tuple[torch.nn.Linear, ...], packed: dict[tuple[torch.nn.Linear, ...], Packed]):
        self.stacked = packed.get(linears)  # (weight, bias, each linear's outputs) or None
        # each linear by itself where they are not stacked: a Packed, or the nn.Linear
        self.parts = [] if self.stacked is not None else [packed.get((linear,), linear) for linear in linears]

    def outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [..., K] -> each linear's output [..., N_i] (views of one tensor where stacked)."""
        if self.stacked is not None:
            weight, bias, sizes = self.stacked
            return packed_linear(x, weight, bias).split(sizes, dim=-1)
        return tuple(_apply(x, part) for part in self.parts)

    def joined(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., K] -> the linears' outputs side by side [..., sum N_i]."""
        if self.stacked is not None:
            weight, bias, _ = self.stacked
            return packed_linear(x, weight, bias)
        outputs = self.outputs(x)
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)


def _apply(x: torch.Tensor, part: "Packed | torch.nn.Linear") -> torch.Tensor:
    """A plain ``nn.Linear``'s forward without the module call, or a packed weight's."""
    if isinstance(part, torch.nn.Linear):
        return F.linear(x, part.weight, part.bias)
    weight, bias, _ = part
    return packed_linear(x, weight, bias)


@dataclass(frozen=True, slots=True)
class _Layer:
    """A decoder layer's parameters and constants, read from its modules once per batch (an
    ``nn.Module`` attribute goes through ``Module.__getattr__``, and a step read 14 per layer and
    token). The tensors are the parameters themselves, so they are read as they are at each step."""

    attn: torch.nn.Module  # for transformers' SDPA function
    input_norm: torch.Tensor
    input_eps: float
    qkv: _Projection
    qk_norm: torch.Tensor | None  # [heads + kv_heads, D]: q_norm's weight per query head, k_norm's per key head
    qk_eps: float | None  # None where qk_norm is None
    o: _Projection
    post_norm: torch.Tensor
    post_eps: float
    gate_up: _Projection
    down: _Projection
    heads: int
    kv_heads: int
    head_dim: int


def _layer_plan(layer: torch.nn.Module, config, qk_norm: torch.Tensor | None, packed: dict) -> _Layer:
    """``layer``'s ``_Layer`` for a batch whose packed weights are ``packed``."""
    attn, mlp = layer.self_attn, layer.mlp
    return _Layer(
        attn=attn, input_norm=layer.input_layernorm.weight, input_eps=layer.input_layernorm.variance_epsilon,
        qkv=_Projection((attn.q_proj, attn.k_proj, attn.v_proj), packed), qk_norm=qk_norm,
        qk_eps=attn.q_norm.variance_epsilon if qk_norm is not None else None, o=_Projection((attn.o_proj,), packed),
        post_norm=layer.post_attention_layernorm.weight, post_eps=layer.post_attention_layernorm.variance_epsilon,
        gate_up=_Projection((mlp.gate_proj, mlp.up_proj), packed), down=_Projection((mlp.down_proj,), packed),
        heads=config.num_attention_heads, kv_heads=config.num_key_value_heads, head_dim=attn.head_dim,
    )


class _Step:
    """One batch's decode step: (input_ids [R, 1], attention_mask [R, n], position_ids [R, 1],
    cache) -> next-token logits [R, V] in float32, the cache advanced by one position."""

    def __init__(self, decoder: LeanDecoder, cos: torch.Tensor, signed_sin: torch.Tensor, layers: list[_Layer],
                 packed: dict):
        self.decoder, self.cos, self.sin = decoder, cos, signed_sin  # [N, D] each (``_signed_sin``)
        self.layers = layers
        self.packed = packed  # (nn.Linear, ...) -> Packed (empty: torch's F.linear)
        model = decoder.model
        self.norm = (model.model.norm.weight, model.model.norm.variance_epsilon)
        self.head = _Projection((model.lm_head,), packed)

    def __call__(self, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
        cos = self.cos[position_ids].unsqueeze(1)  # [R, 1, 1, D]
        sin = self.sin[position_ids].unsqueeze(1)  # [R, 1, 1, D]
        x = self.decoder.model.model.embed_tokens(input_ids)  # [R, 1, H]
        # transformers' SDPA mask for one query per row: None when nothing is padded, else
        # True where a row may attend; [R, 1, 1, n]
        mask = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        for layer, cache_layer in zip(self.layers, cache.layers, strict=True):
            x = self._layer(layer, x, cos, sin, mask, cache_layer)
        x = _rms_norm(x, *self.norm)
        return self.head.joined(x)[:, -1, :].float()  # [R, V]

    def _attention(self, layer: _Layer, q, keys, values, mask) -> torch.Tensor:
        """transformers' SDPA function; with ``fast_kernels``, ``float32_decode_attention`` where
        float32 is the faster arithmetic (heron.device.decode_attention_in_float32)."""
        scaling = layer.attn.scaling
        if self.decoder.fast_kernels and decode_attention_in_float32(q):
            return float32_decode_attention(q, keys, values, mask, scaling)
        return self.decoder.attention(layer.attn, q, keys, values, mask, dropout=0.0, scaling=scaling)[0]

    def _layer(self, layer: _Layer, x, cos, sin, mask, cache_layer) -> torch.Tensor:
        """One decoder layer on x [R, 1, H] -> [R, 1, H]; writes this token's keys and values.
        Queries and keys go through their RMSNorm and RoPE together, as views of the projection's
        output (elementwise per head: the same arithmetic as apart, in fewer kernel calls)."""
        rows, dim, heads, kv_heads = x.shape[0], layer.head_dim, layer.heads, layer.kv_heads
        h = _rms_norm(x, layer.input_norm, layer.input_eps)  # [R, 1, H]
        qkv = layer.qkv.joined(h)  # [R, 1, (heads + 2 kv_heads) D]
        qk = qkv.narrow(-1, 0, (heads + kv_heads) * dim).view(rows, 1, heads + kv_heads, dim)
        v = qkv.narrow(-1, (heads + kv_heads) * dim, kv_heads * dim).view(rows, 1, kv_heads, dim).transpose(1, 2)
        if layer.qk_norm is not None:
            qk = _rms_norm(qk, layer.qk_norm, layer.qk_eps)
        qk = _rotate(qk.transpose(1, 2), cos, sin)  # [R, heads + kv_heads, 1, D]
        keys, values = cache_layer.update(qk.narrow(1, heads, kv_heads), v)  # [R, kv_heads, n, D] each
        out = self._attention(layer, qk.narrow(1, 0, heads), keys, values, mask)  # [R, 1, heads, D]
        x = x + layer.o.joined(out.reshape(rows, 1, -1))
        h = _rms_norm(x, layer.post_norm, layer.post_eps)
        gate, up = layer.gate_up.outputs(h)
        return x + layer.down.joined(F.silu(gate) * up)
