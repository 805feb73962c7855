"""The embedded rollout engine: an HF transformers causal LM decoding in-process.

Shapes: B = rows in a batch, P = padded prompt length, T = most new tokens of any row in the
batch, V = vocabulary size, S = most stop tokens of any row.

How a batch is decoded: prompts are left-padded to P so every row's next token sits in the
last column; position ids count only real tokens (cumsum(mask) - 1), so a padded prompt sees
the same positions as it would alone. One prefill of the distinct prompts (one forward per
group of similar length where their lengths differ a lot: ``heron.rollout.batch_rows``) fills
a KV cache allocated once for P + T positions (``heron.rollout.kv_cache``) whose rows are then
copied to every request of the prompt, then each step feeds one token per row. A row finishes on
one of its stop tokens (kept in the output, with its logprob) or after its ``max_new_tokens``;
finished rows leave the decode batch (down to ``min_rows`` rows, see
``heron.rollout.batch_rows``); the loop ends as soon as every row has finished.

Sampling is per row (temperature, top-p, greedy, seed); see ``heron.rollout.sampling`` for the
logprob convention and why a request's sample does not depend on its batch. Note that two
requests with the same prompt and the same ``seed`` produce the same sample: callers give each
sample of a group its own seed.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from heron.records import Generation, GenerationRequest
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.rollout.batch_rows import MIN_ROWS, batch_params, distinct_prompts, prefill_groups, rows_to_keep
from heron.rollout.kv_cache import join_caches, joinable, preallocated_cache
from heron.rollout.lean_decoder import LeanDecoder, unsupported_reason
from heron.rollout.request_checks import validate_request
from heron.rollout.sampling import select_tokens
from heron.weights.broadcast import PushStream, joined_group
from heron.weights.handle import WeightHandle

DECODERS = ("auto", "lean", "hf")
# What one more prefill forward costs, in prompt tokens. Measured on a 2-core AMD EPYC (float32):
# 8 prompts of 60-250 tokens prefilled one by one took 0.66x (3.2 M model) and 0.70x (25 M) the
# time of one forward padded to 250: a forward's own cost was ~20-30 tokens' worth. 64 splits
# only where that pays with margin.
PREFILL_FORWARD_TOKENS = 64


def _left_pad(
    prompts: Sequence[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns input_ids [B, P] and attention_mask [B, P] (0 on padding) for left-padded prompts."""
    length = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_token_id] * (length - len(p)) + p for p in prompts], device=device)  # [B, P]
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=device)  # [B, P]
    return input_ids, mask


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5.x names the KV-cache argument ``cache``; older models ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_rows(index: list[int] | None, order: list[int]) -> list[int] | None:
    """The cache row of each request [B], given each request's distinct prompt (``index``; None:
    request i is prompt i) and the prompt in each cache row (``order``); None when row i is
    request i's already."""
    row_of = {prompt: row for row, prompt in enumerate(order)}
    rows = [row_of[prompt] for prompt in (index if index is not None else range(len(order)))]
    return None if rows == list(range(len(rows))) else rows


class EmbeddedEngine(Resident):
    """``RolloutEngine`` over an in-process HF causal LM (batched, KV-cached, seeded per request).

    Example::

        engine = EmbeddedEngine.from_pretrained("runs/toy/model")
        [gen] = engine.generate([GenerationRequest([5, 6, 7], SamplingParams(seed=1))])
    """

    def __init__(
        self, model: torch.nn.Module, *, pad_token_id: int, max_batch_size: int = 64, policy_version: int = 0,
        share_prompts: bool = True, drop_finished: bool = True, min_rows: int = MIN_ROWS, decoder: str = "auto",
        prefill_forward_tokens: int | None = PREFILL_FORWARD_TOKENS,
    ):
        """``share_prompts``: prefill each distinct prompt of a batch once; ``drop_finished``: take
        finished rows out of the decode batch, keeping at least ``min_rows`` (heron.rollout.batch_rows);
        ``decoder``: ``lean`` decodes with ``heron.rollout.lean_decoder`` where it supports the
        model (the HF forward's arithmetic without transformers' per-call work: bit-identical),
        ``auto`` the same with the linears' weights packed for oneDNN once per batch on the CPU
        (equal up to summation order), ``hf`` always with the model's forward. The prefill always
        runs the model's forward. ``prefill_forward_tokens``: what one more prefill forward costs,
        in prompt tokens; prompts of very different lengths are prefilled in groups where that
        saves more padded tokens than this per extra forward (``prefill_groups``; None: one padded
        forward, as before)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if min_rows < 1:
            raise ValueError(f"min_rows must be >= 1, got {min_rows}")
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        self.model = model
        self.pad_token_id = pad_token_id
        self.max_batch_size = max_batch_size
        self.share_prompts, self.drop_finished, self.min_rows = share_prompts, drop_finished, min_rows
        self.prefill_forward_tokens = prefill_forward_tokens
        self._joinable = joinable(model.config)
        self._policy_version = policy_version
        self._cache_kwarg = _cache_kwarg(model)
        self.decoder_reason = "engine.embedded.decoder=hf" if decoder == "hf" else unsupported_reason(model)
        self._lean = LeanDecoder(model, fast_kernels=decoder == "auto") if self.decoder_reason is None else None

    @property
    @host_only
    def decoder(self) -> str:
        """``lean`` or ``hf``: what decodes this engine's batches (``decoder_reason`` says why not lean)."""
        return "lean" if self._lean is not None else "hf"

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> EmbeddedEngine:
        """Loads an HF folder in float32, in eval mode, without grads. ``pad_token_id`` defaults
        to the model config's."""
        from heron.device import HOST, place
        from heron.models import load_model

        model = place(load_model(str(path), "float32"), HOST).eval().requires_grad_(False)
        if kwargs.get("pad_token_id") is None:
            kwargs["pad_token_id"] = model.config.pad_token_id
            if kwargs["pad_token_id"] is None:
                raise ValueError(f"{path}: config has no pad_token_id; pass pad_token_id=")
        return cls(model, **kwargs)

    @property
    @host_only
    def policy_version(self) -> int:
        return self._policy_version

    @property
    @host_only
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @needs_device
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        for index, request in enumerate(requests):
            validate_request(index, request)
        generations: list[Generation] = []
        for start in range(0, len(requests), self.max_batch_size):
            generations.extend(self._generate_batch(requests[start : start + self.max_batch_size]))
        return generations

    def _forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache
    ) -> torch.Tensor:
        """Runs the model on new tokens input_ids [B, L] -> next-token logits [B, V] (float32)."""
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,  # [B, past + L]
            position_ids=position_ids,  # [B, L]
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        return output.logits[:, -1, :].float()  # [B, V]

    def _prefill(self, prompts: Sequence[list[int]], capacity: int) -> tuple[object, torch.Tensor, ...]:
        """Prefills the B prompts into a new cache of ``capacity`` slots: each distinct prompt
        once when sharing, in groups of similar length (``prefill_groups``). Returns the cache, the
        next-token logits [B, V], the prompts' attention mask [B, P] (left padding) and each
        row's next position [B, 1]."""
        device = self.device
        distinct, index = distinct_prompts(prompts, share=self.share_prompts, min_rows=self.min_rows)
        groups = self._prefill_groups(distinct)
        order = [i for group in groups for i in group]  # the cache's row k holds distinct[order[k]]
        input_ids, prompt_mask = _left_pad([distinct[i] for i in order], self.pad_token_id, device)  # [U, P], [U, P]
        positions = (prompt_mask.cumsum(dim=-1) - 1).clamp(min=0)  # [U, P]
        if len(groups) == 1:
            cache = preallocated_cache(self.model.config, capacity)
            logits = self._forward(input_ids, prompt_mask, positions, cache)  # [U, V]
        else:
            widths = [max(len(distinct[i]) for i in group) for group in groups]
            sizes = [len(group) for group in groups]
            cache, logits = self._prefill_by_group(input_ids, prompt_mask, positions, widths, sizes, capacity)
        rows = _cache_rows(index, order)
        if rows is not None:  # each request's row: its distinct prompt's, repeated where shared
            rows = torch.tensor(rows, device=device)  # [B]
            cache.batch_select_indices(rows)
            logits, prompt_mask, positions = logits[rows], prompt_mask[rows], positions[rows]  # [B, ...]
        return cache, logits, prompt_mask, positions[:, -1:] + 1

    def _prefill_groups(self, distinct: Sequence[list[int]]) -> list[list[int]]:
        """``prefill_groups`` of the distinct prompts; one group where the cache's layers cannot
        be joined (``joinable``) or splitting is off."""
        if self.prefill_forward_tokens is None or not self._joinable:
            return [list(range(len(distinct)))]
        return prefill_groups([len(p) for p in distinct], self.prefill_forward_tokens)

    def _prefill_by_group(self, input_ids, prompt_mask, positions, widths: list[int], sizes: list[int],
                          capacity: int) -> tuple[object, torch.Tensor]:
        """One forward per group of rows (``sizes`` consecutive rows of input_ids [U, P], each
        group over its last ``widths`` columns: its own prompts, padded to its longest), each into
        a cache of its own, then one cache of ``capacity`` slots with every group's keys ending at
        slot P (``join_caches``) -> (cache, logits [U, V])."""
        config, full = self.model.config, input_ids.shape[1]
        caches, logits, row = [], [], 0
        for width, size in zip(widths, sizes):
            rows, columns = slice(row, row + size), slice(full - width, full)
            part = preallocated_cache(config, width)
            logits.append(self._forward(input_ids[rows, columns], prompt_mask[rows, columns],
                                        positions[rows, columns], part))  # [size, V]
            caches.append(part)
            row += size
        return join_caches(config, caches, full, capacity), torch.cat(logits)  # [U, V]

    @torch.inference_mode()
    def _generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        device = self.device
        params = batch_params(requests, device)
        prompts = [r.prompt_tokens for r in requests]
        capacity = max(len(p) for p in prompts) + params.num_steps  # P + T
        lean = self._lean if params.num_steps > 1 else None  # one new token: the prefill is all there is
        decode = (lean.session(capacity, len(requests)) if lean is not None else None) or self._forward
        cache, logits, prompt_mask, next_position = self._prefill(prompts, capacity)
        full_mask = torch.cat([prompt_mask, prompt_mask.new_ones(len(requests), params.num_steps)], dim=1)  # [B, P + T]
        num_rows, prompt_len = len(requests), prompt_mask.shape[1]
        tokens_out = torch.full((num_rows, params.num_steps), self.pad_token_id, device=device)  # [B, T]
        logprobs_out = torch.zeros(num_rows, params.num_steps, device=device)  # [B, T]
        num_tokens = params.max_new_tokens.clone()  # [B]
        stopped = torch.zeros(num_rows, dtype=torch.bool, device=device)  # [B]
        row_ids = torch.arange(num_rows, device=device)  # [R]: the request each decoded row answers
        active = torch.ones(num_rows, dtype=torch.bool, device=device)  # [R]
        for step in range(params.num_steps):
            tokens, logprobs = select_tokens(
                logits, params.temperature, params.uniforms[:, step], params.top_p, params.greedy
            )  # [R], [R]
            tokens_out[row_ids, step] = tokens
            logprobs_out[row_ids, step] = logprobs
            if params.stop_token_ids is not None:
                hit_stop = active & (tokens.unsqueeze(-1) == params.stop_token_ids).any(dim=-1)  # [R]
                num_tokens[row_ids] = torch.where(hit_stop, step + 1, num_tokens[row_ids])
                stopped[row_ids] |= hit_stop
                active &= ~hit_stop
            active &= params.max_new_tokens > step + 1
            if not bool(active.any()):  # also true after the last step: max_new_tokens <= T
                break
            keep = rows_to_keep(active, self.min_rows) if self.drop_finished else None
            if keep is not None:  # finished rows leave the batch: [R] -> [R']
                cache.batch_select_indices(keep)
                params, row_ids, active, tokens = params.select(keep), row_ids[keep], active[keep], tokens[keep]
                full_mask, next_position = full_mask[keep], next_position[keep]
            feed = tokens.masked_fill(~active, self.pad_token_id).unsqueeze(-1)  # [R, 1]
            logits = decode(feed, full_mask[:, : prompt_len + step + 1], next_position, cache)  # [R, V]
            next_position = next_position + 1  # [R, 1]
        return self._to_generations(tokens_out, logprobs_out, num_tokens, stopped)

    def _to_generations(
        self, tokens: torch.Tensor, logprobs: torch.Tensor, num_tokens: torch.Tensor, stopped: torch.Tensor
    ) -> list[Generation]:
        """tokens [B, T], logprobs [B, T], num_tokens [B], stopped [B] -> one Generation per row."""
        rows = zip(tokens.tolist(), logprobs.tolist(), num_tokens.tolist(), stopped.tolist())
        return [
            Generation(
                tokens=row_tokens[:n],
                logprobs=row_logprobs[:n],
                finish_reason="stop" if row_stopped else "length",
                policy_version=self._policy_version,
            )
            for row_tokens, row_logprobs, n, row_stopped in rows
        ]

    @needs_device
    def load_weights(self, handle: WeightHandle) -> None:
        """Copies the handle's tensors into the model's in place (same objects, so references
        held elsewhere stay valid). Keys are the model's ``state_dict`` names; of tied parameters
        (e.g. ``lm_head.weight`` = ``model.embed_tokens.weight``) either name suffices. Checks
        everything before changing anything. A broadcast push is copied in bucket by bucket as it
        arrives (its layout checked first), so the engine holds one bucket beside its model."""
        if handle.by_broadcast:
            self._stream_in(joined_group().stream(handle.version), handle.version)
            return
        self._copy_in(handle.tensors())
        self._policy_version = handle.version

    @host_only
    def join_weight_group(self, addr: str, port: int, rank: int, size: int, timeout_s: float, bucket_bytes: int) -> None:
        """``cluster.weight_transport=broadcast``: this process joins the group as ``rank`` and
        receives each push on the engine's device (``heron.weights.broadcast``)."""
        from heron.weights.broadcast import join

        join(addr, port, rank, size, timeout_s, device=self.device, bucket_bytes=bucket_bytes)

    @host_only
    def served_versions(self) -> dict[str, int]:
        return {"engine": self._policy_version}

    @host_only
    def holdings(self) -> Holdings:
        """Weights and buffers (guarded while asleep). The KV cache lives only inside ``generate``
        (one preallocated cache per batch, freed on return), so at rest it holds 0 bytes of cache."""
        model = self.model

        def inventory():
            return {"params": list(model.parameters()), "buffers": list(model.buffers()), "kv_cache": []}

        return Holdings(inventory, [("model", model)], device=self.device)

    @host_only
    def close(self) -> None:
        """Nothing to stop: the model lives in this process."""

    def _copy_in(self, state: Mapping[str, torch.Tensor]) -> None:
        targets = self._fitting_targets({name: tuple(tensor.shape) for name, tensor in state.items()})
        with torch.no_grad():
            for name, tensor in state.items():
                targets[name].copy_(tensor)

    def _stream_in(self, stream: PushStream, version: int) -> None:
        """A push received bucket by bucket: checked on its layout, then each bucket copied in as
        it arrives. Every bucket is received even when a copy fails, so the sender completes; a
        push that fails part-way leaves version -1 (the run's version check then fails)."""
        try:
            targets = self._fitting_targets(stream.shapes)
            self._policy_version = -1
            with torch.no_grad():
                for part in stream:
                    for name, tensor in part.items():
                        targets[name].copy_(tensor)
            self._policy_version = version
        finally:
            stream.drain()

    def _fitting_targets(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
        """The live tensors by name, once ``shapes`` (a push's) fit the model: ValueError naming
        an unknown key, a wrong shape or a missing one."""
        targets = self._named_tensors()
        for name, shape in shapes.items():
            if name not in targets:
                raise ValueError(f"load_weights: unknown key {name!r} (not in the model's state_dict)")
            if tuple(shape) != tuple(targets[name].shape):
                raise ValueError(
                    f"load_weights: shape mismatch for {name!r}: got {tuple(shape)}, "
                    f"model has {tuple(targets[name].shape)}"
                )
        for names in self._parameter_aliases():
            if not any(n in shapes for n in names):
                raise ValueError(f"load_weights: missing key {names[0]!r}")
        return targets

    def _named_tensors(self) -> dict[str, torch.Tensor]:
        """Every name of the model's state_dict (tied aliases included) -> its live tensor."""
        tensors = dict(self.model.named_parameters(remove_duplicate=False))
        tensors.update(self.model.named_buffers(remove_duplicate=False))
        return {name: tensors[name] for name in self.model.state_dict(keep_vars=True) if name in tensors}

    def _parameter_aliases(self) -> list[list[str]]:
        """Names of each distinct parameter (several when tied), in model order."""
        aliases: dict[int, list[str]] = {}
        for name, param in self.model.named_parameters(remove_duplicate=False):
            aliases.setdefault(id(param), []).append(name)
        return list(aliases.values())


def build_embedded_engine(spec) -> EmbeddedEngine:
    """``engine.kind=embedded``: the policy folder loaded in ``engine.embedded.dtype`` (default
    ``model.dtype``), frozen, in this process."""
    from heron.device import check_bf16, place, resolve
    from heron.models import load_model
    from heron.preflight.device import component_bf16_requests

    dtype = spec.engine.embedded.dtype or spec.model.dtype
    device = resolve(spec.device)
    check_bf16(component_bf16_requests(spec.model.dtype, engine_dtype=dtype), device, allow_emulated=spec.allow_emulated_bf16)
    model = place(load_model(spec.model.path, dtype), device).eval().requires_grad_(False)
    return EmbeddedEngine(
        model, pad_token_id=spec.pad_token_id, max_batch_size=spec.rollout.max_batch_size,
        decoder=spec.engine.embedded.decoder,
    )
