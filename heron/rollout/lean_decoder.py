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


def _rms_norm(x: torch.Tensor, norm: torch.nn.Module, weight: torch.Tensor | None = None) -> torch.Tensor:
    """transformers' RMSNorm (Llama, Qwen2, Qwen3), written out: statistics in float32, the
    weight (``norm``'s, or ``weight`` when given) applied after the cast back to the input dtype."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return (norm.weight if weight is None else weight) * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin; x [R, heads, 1, D], cos/sin [R, 1, 1, D]."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


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
        return _Step(self, cos[0], sin[0], self._qk_norm_weights(), packed)

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


class _Step:
    """One batch's decode step: (input_ids [R, 1], attention_mask [R, n], position_ids [R, 1],
    cache) -> next-token logits [R, V] in float32, the cache advanced by one position."""

    def __init__(self, decoder: LeanDecoder, cos: torch.Tensor, sin: torch.Tensor, qk_weights: list, packed: dict):
        self.decoder, self.cos, self.sin = decoder, cos, sin  # [N, D] each
        self.qk_weights = qk_weights  # per layer [heads + kv_heads, D] or None
        self.packed = packed  # (nn.Linear, ...) -> Packed (empty: torch's F.linear)

    def __call__(self, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
        model = self.decoder.model.model
        cos = self.cos[position_ids].unsqueeze(1)  # [R, 1, 1, D]
        sin = self.sin[position_ids].unsqueeze(1)  # [R, 1, 1, D]
        x = model.embed_tokens(input_ids)  # [R, 1, H]
        # transformers' SDPA mask for one query per row: None when nothing is padded, else
        # True where a row may attend; [R, 1, 1, n]
        mask = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        for layer, cache_layer, qk_weight in zip(model.layers, cache.layers, self.qk_weights, strict=True):
            x = self._layer(layer, x, cos, sin, mask, cache_layer, qk_weight)
        x = _rms_norm(x, model.norm)
        return self._linear(x, self.decoder.model.lm_head)[:, -1, :].float()  # [R, V]

    def _linear(self, x: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
        """A plain ``nn.Linear``'s forward (``_check_modules`` made sure it is one), without the
        module call; through its packed weight when the batch has one."""
        return self._linears(x, linear)[0]

    def _linears(self, x: torch.Tensor, *linears: torch.nn.Linear) -> tuple[torch.Tensor, ...]:
        """x [..., K] through each of ``linears`` -> one output per linear; a single kernel call
        where the batch packed them together."""
        packed = self.packed.get(linears)
        if packed is not None:
            weight, bias, sizes = packed
            return packed_linear(x, weight, bias).split(sizes, dim=-1)
        if len(linears) > 1:  # not packed together: each by itself, packed or not
            return tuple(self._linears(x, linear)[0] for linear in linears)
        return (F.linear(x, linears[0].weight, linears[0].bias),)

    def _attention(self, attn, q, keys, values, mask) -> torch.Tensor:
        """transformers' SDPA function; with ``fast_kernels``, ``float32_decode_attention`` where
        float32 is the faster arithmetic (heron.device.decode_attention_in_float32)."""
        if self.decoder.fast_kernels and decode_attention_in_float32(q):
            return float32_decode_attention(q, keys, values, mask, attn.scaling)
        return self.decoder.attention(attn, q, keys, values, mask, dropout=0.0, scaling=attn.scaling)[0]

    def _layer(self, layer, x, cos, sin, mask, cache_layer, qk_weight) -> torch.Tensor:
        """One decoder layer on x [R, 1, H] -> [R, 1, H]; writes this token's keys and values.
        Queries and keys go through their RMSNorm and RoPE together (elementwise per head: the
        same arithmetic as apart, in fewer kernel calls)."""
        attn, linear = layer.self_attn, self._linear
        rows, head_dim = x.shape[0], attn.head_dim
        h = _rms_norm(x, layer.input_layernorm)  # [R, 1, H]
        q, k, v = self._linears(h, attn.q_proj, attn.k_proj, attn.v_proj)
        q = q.view(rows, 1, -1, head_dim)  # [R, 1, heads, D]
        k = k.view(rows, 1, -1, head_dim)  # [R, 1, kv_heads, D]
        v = v.view(rows, 1, -1, head_dim).transpose(1, 2)  # [R, kv_heads, 1, D]
        heads = q.shape[2]
        qk = torch.cat([q, k], dim=2)  # [R, 1, heads + kv_heads, D]
        if qk_weight is not None:
            qk = _rms_norm(qk, attn.q_norm, qk_weight)
        qk = _rotate(qk.transpose(1, 2), cos, sin)  # [R, heads + kv_heads, 1, D]
        q, k = qk[:, :heads], qk[:, heads:]
        keys, values = cache_layer.update(k, v)  # [R, kv_heads, n, D] each
        out = self._attention(attn, q, keys, values, mask)  # [R, 1, heads, D]
        x = x + linear(out.reshape(rows, 1, -1), attn.o_proj)
        h = _rms_norm(x, layer.post_attention_layernorm)
        mlp = layer.mlp
        gate, up = self._linears(h, mlp.gate_proj, mlp.up_proj)
        return x + linear(F.silu(gate) * up, mlp.down_proj)
