"""The output head per chunk of positions, and at the answer positions only: a causal LM's
[B, L, V] logits never exist whole.

Why, chunks: for a 150 k vocabulary the logits, their float32 copy and the log-softmax autograd
keeps for the backward are each ``B L V`` floats -- far more than a small model's activations,
and what stops long rollouts from fitting on a GPU. Chunking only the log-softmax (the full
logits already computed) leaves the largest tensor in place.

Why, answer positions: the loss, the KL, pi_old and the entropy read a logprob only where it
predicts an answer token; at the prompt's positions (all but its last) and the padding it is
never read. The head there is V x H multiply-adds per position, forward and twice in the backward,
plus a log-softmax over V: for a 150 k vocabulary and a small model that is most of the step
(bench/answer_head.py). TRL's GRPO skips it the same way (``logits_to_keep``), which only fits its
left-padded prompts; a right-padded or shared-prompt batch has its answers at other positions in
every row, so the head takes them by index.

How: for one forward of the model, its output head (``get_output_embeddings()``, the lm_head)
computes, for the positions ``scored`` picks (all, or the answer positions: N of them),
``c`` positions (per row) at a time and under activation checkpointing,

    z_c = head(h_c)                                  [B, c, V] or [c B, V]  (inside the model's autocast)
    logprob_c = log_softmax(z_c / temperature)[y_c]  (float32, autocast off)
    entropy_c = -sum_v p_v log p_v

and returns those (``[B, L, k]``, k = 1 or 2, 0 at the positions not scored) in place of the
logits. The backward recomputes one chunk's logits at a time, so at most ``B c V`` of them are
alive. The model's own forward runs unchanged around it, and so does whatever wraps the model
(FSDP2 gathers and reduces the head's weight as always, DDP's reducer sees its forward, PEFT's
LoRA head keeps its adapter).

Values: each position's logits are the same dot products as in the whole matmul; the head
weight's gradient is summed chunk by chunk, and without the positions not scored, whose terms
are exact zeros (another order of the same sum: tests/tolerance.py, rule 2;
tests/unit/test_logprobs_chunked.py, tests/unit/test_answer_head.py). A position not scored gets
no gradient either way: nothing reads its logprob.

Only models whose forward returns the head's output as its logits unchanged qualify: one that
scales or soft-caps them (Gemma 2's ``final_logit_softcapping``, Cohere's ``logit_scale``) is
refused with a one-line error at its first forward when chunked, and keeps the whole head
otherwise (``plain_head_reason``: the answer positions are used only for transformers' own
classes of ``PLAIN_HEAD_MODEL_TYPES``, each checked in tests/unit/test_answer_head.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch.utils.checkpoint import checkpoint

from heron.algo.entropy import entropy_from_logprobs
from heron.errors import UserError
from heron.lora import unwrap

# model types whose ForCausalLM forward returns ``lm_head(hidden)`` as its logits, unscaled and
# uncapped (not Gemma 2/3, Cohere, Granite)
PLAIN_HEAD_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "olmo2",
                          "gemma")


def position_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool,
                      entropy_grad: bool = True):
    """logits [B, c, V], targets [B, c] -> (logprobs [B, c], entropy [B, c] or None), float32.
    ``entropy_grad=False``: the entropy is computed outside autograd (a metric), so its
    ``exp(log_softmax)`` [B, c, V] is not kept for a backward."""
    log_softmax = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, c, V]
    logprobs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, c]
    if not with_entropy:
        return logprobs, None
    return logprobs, entropy_from_logprobs(log_softmax if entropy_grad else log_softmax.detach())


class HeadChunks:
    """Stands in for the head's ``forward`` during one model forward (see the module docstring).

    ``targets`` [B, T] are the tokens each position predicts; the model sees those T positions
    (heron.trainer.logprobs runs none that predicts nothing) or, given a whole row, T + 1, the
    last of which is computed against a dummy target and dropped, so its gradient is exactly zero
    (or, with ``scored`` [B, T] bool, not computed: only the positions it marks are)."""

    def __init__(self, head_forward: Callable, targets: torch.Tensor, temperature: float,
                 with_entropy: bool, chunk_size: int, model_name: str, scored: torch.Tensor | None = None,
                 entropy_grad: bool = True):
        self.head_forward = head_forward
        self.targets = targets  # [B, T]
        self.temperature = temperature
        self.with_entropy = with_entropy
        self.chunk_size = chunk_size
        self.model_name = model_name
        self.scored = scored  # [B, T] bool, or None: every position
        self.entropy_grad = entropy_grad  # False: the entropy is a metric (``position_logprobs``)
        self.output: torch.Tensor | None = None  # [B, T or T + 1, k]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, T + 1, H] or [B, T, H]
        padded, keep = self.targets, self.scored  # [B, T] each
        if hidden.shape[1] > self.targets.shape[1]:
            padded = torch.cat([self.targets, self.targets[:, -1:]], dim=1)  # [B, T + 1]
            if keep is not None:
                keep = torch.cat([keep, keep.new_zeros(len(keep), 1)], dim=1)  # [B, T + 1]
        if keep is None:
            self.output = self._in_chunks(hidden, padded, self.chunk_size)
            return self.output
        where = keep.nonzero(as_tuple=True)  # ([N] rows, [N] columns), in row-major order
        index = where[0] * keep.shape[1] + where[1]  # [N] flat positions
        rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)  # [N, H]
        targets = padded.reshape(-1)[index]  # [N]
        values = self._in_chunks(rows[None], targets[None], self.chunk_size * len(hidden))[0]  # [N, k]
        # [B, S, k], S = T or T + 1: a fresh tensor, not a view of one (FSDP2 hooks the root's
        # output for the backward and warns on a view)
        self.output = values.new_zeros(*keep.shape, values.shape[-1]).index_put(where, values)
        return self.output

    def _in_chunks(self, hidden: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
        """hidden [R, P, H], targets [R, P] -> [R, P, k], ``size`` positions of dim 1 at a time,
        each recomputed in the backward (all at once when 0 or at least P)."""
        if not 0 < size < hidden.shape[1]:
            return self._chunk(hidden, targets)
        recompute = torch.is_grad_enabled()
        parts = [
            checkpoint(self._chunk, h, y, use_reentrant=False, preserve_rng_state=False) if recompute else self._chunk(h, y)
            for h, y in zip(hidden.split(size, dim=1), targets.split(size, dim=1))
        ]
        return torch.cat(parts, dim=1)

    def _chunk(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """hidden [B, c, H], targets [B, c] -> [B, c, k]: logprob (and entropy) per position."""
        logits = self.head_forward(hidden)  # [B, c, V]
        with torch.autocast(hidden.device.type, enabled=False):
            logprobs, entropy = position_logprobs(logits, targets, self.temperature, self.with_entropy,
                                                  self.entropy_grad)
        # stacked, not unsqueezed: a fresh tensor, as the model's output must be under FSDP2 (above)
        return torch.stack([logprobs] if entropy is None else [logprobs, entropy], dim=-1)

    def results(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logprobs [B, T], entropy [B, T] or None) from the model's output ``logits``, which must
        be what ``__call__`` returned."""
        if self.output is None or logits is not self.output:
            if self.scored is not None:
                raise RuntimeError(
                    f"{self.model_name} does not return its lm_head's output as its logits (it scales or soft-caps "
                    "them), so the head cannot run at some positions only: pass scored=None for it (the trainer does "
                    "where heron.trainer.lm_head_chunks.plain_head_reason names a reason)"
                )
            raise UserError(
                f"train.logprob_chunk_size: {self.model_name} does not return its lm_head's output as its logits "
                "(it scales or soft-caps them), so the head cannot run per chunk; set train.logprob_chunk_size=0"
            )
        out = self.output[:, : self.targets.shape[1]]  # [B, T, k]
        if not self.with_entropy:
            return out[..., 0], None
        return out[..., 0], out[..., 1] if self.entropy_grad else out[..., 1].detach()


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The model's output embedding module, through a DDP or PEFT wrapper."""
    for candidate in (model, getattr(model, "module", None)):
        get = getattr(candidate, "get_output_embeddings", None)
        head = get() if callable(get) else None
        if isinstance(head, torch.nn.Module):
            return head
    raise UserError(
        f"train.logprob_chunk_size: {type(model).__name__} has no output head (get_output_embeddings() gave none); "
        "set train.logprob_chunk_size=0"
    )


def plain_head_reason(model: torch.nn.Module) -> str | None:
    """None when ``model`` (through a DDP, FSDP or PEFT wrapper) returns its head's output as its
    logits unchanged, so that the head may run at the answer positions alone; else why not (one
    phrase). Decided from the model type and transformers' own class, not from a forward."""
    inner = unwrap(getattr(model, "module", model))
    model_type = getattr(getattr(inner, "config", None), "model_type", None)
    if model_type not in PLAIN_HEAD_MODEL_TYPES:
        return f"model type {model_type!r} (answer positions only for {', '.join(PLAIN_HEAD_MODEL_TYPES)})"
    defined_in = getattr(type(inner).forward, "__module__", "") or ""
    if not defined_in.startswith("transformers.models."):
        return f"{type(inner).__name__}.forward is not transformers' own (from {defined_in!r})"
    return None


@contextmanager
def head_in_chunks(model: torch.nn.Module, targets: torch.Tensor, temperature: float, with_entropy: bool,
                   chunk_size: int, scored: torch.Tensor | None = None,
                   entropy_grad: bool = True) -> Iterator[HeadChunks]:
    """Within the block, ``model``'s output head computes logprobs per chunk instead of logits,
    at the positions ``scored`` [B, T] marks (None: all); its own ``forward`` (an instance
    attribute, if it had one) is restored on every exit."""
    head = output_head(model)
    own = head.__dict__.get("forward")
    chunks = HeadChunks(head.forward, targets, temperature, with_entropy, chunk_size, type(model).__name__, scored,
                        entropy_grad)
    head.forward = chunks
    try:
        yield chunks
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
