"""The output head per chunk of positions: a causal LM's [B, L, V] logits never exist whole.

Why: for a 150 k vocabulary the logits, their float32 copy and the log-softmax autograd keeps
for the backward are each ``B L V`` floats -- far more than a small model's activations, and
what stops long rollouts from fitting on a GPU. Chunking only the log-softmax (the full logits
already computed) leaves the largest tensor in place.

How: for one forward of the model, its output head (``get_output_embeddings()``, the lm_head)
computes, ``c`` positions at a time and under activation checkpointing,

    z_c = head(h_c)                                  [B, c, V]   (inside the model's autocast)
    logprob_c = log_softmax(z_c / temperature)[y_c]  [B, c]      (float32, autocast off)
    entropy_c = -sum_v p_v log p_v                   [B, c]

and returns those (``[B, L, k]``, k = 1 or 2) in place of the logits. The backward recomputes
one chunk's logits at a time, so at most ``B c V`` of them are alive. The model's own forward
runs unchanged around it, and so does whatever wraps the model (FSDP2 gathers and reduces the
head's weight as always, DDP's reducer sees its forward, PEFT's LoRA head keeps its adapter).

Values: each position's logits are the same dot products as in the whole matmul; the head
weight's gradient is summed chunk by chunk, another order of the same sum (tests/tolerance.py,
rule 2; tests/unit/test_logprobs_chunked.py).

Only models whose forward returns the head's output as its logits unchanged qualify: one that
scales or soft-caps them (Gemma 2's ``final_logit_softcapping``, Cohere's ``logit_scale``) is
refused with a one-line error at its first forward.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch.utils.checkpoint import checkpoint

from heron.algo.entropy import entropy_from_logprobs
from heron.errors import UserError


def position_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """logits [B, c, V], targets [B, c] -> (logprobs [B, c], entropy [B, c] or None), float32."""
    log_softmax = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, c, V]
    logprobs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, c]
    return logprobs, entropy_from_logprobs(log_softmax) if with_entropy else None


class HeadChunks:
    """Stands in for the head's ``forward`` during one model forward (see the module docstring).

    ``targets`` [B, T] are the tokens each position predicts; the model sees T + 1 positions,
    the last of which predicts nothing: it is computed against a dummy target and dropped, so
    its gradient is exactly zero."""

    def __init__(self, head_forward: Callable, targets: torch.Tensor, temperature: float,
                 with_entropy: bool, chunk_size: int, model_name: str):
        self.head_forward = head_forward
        self.targets = targets  # [B, T]
        self.temperature = temperature
        self.with_entropy = with_entropy
        self.chunk_size = chunk_size
        self.model_name = model_name
        self.output: torch.Tensor | None = None  # [B, T + 1, k]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:  # hidden [B, T + 1, H]
        padded = torch.cat([self.targets, self.targets[:, -1:]], dim=1)  # [B, T + 1]
        recompute = torch.is_grad_enabled()
        parts = [
            checkpoint(self._chunk, h, y, use_reentrant=False, preserve_rng_state=False) if recompute else self._chunk(h, y)
            for h, y in zip(hidden.split(self.chunk_size, dim=1), padded.split(self.chunk_size, dim=1))
        ]
        self.output = torch.cat(parts, dim=1)  # [B, T + 1, k]
        return self.output

    def _chunk(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """hidden [B, c, H], targets [B, c] -> [B, c, k]: logprob (and entropy) per position."""
        logits = self.head_forward(hidden)  # [B, c, V]
        with torch.autocast(hidden.device.type, enabled=False):
            logprobs, entropy = position_logprobs(logits, targets, self.temperature, self.with_entropy)
        return torch.stack([logprobs, entropy], dim=-1) if entropy is not None else logprobs.unsqueeze(-1)

    def results(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logprobs [B, T], entropy [B, T] or None) from the model's output ``logits``, which must
        be what ``__call__`` returned."""
        if self.output is None or logits is not self.output:
            raise UserError(
                f"train.logprob_chunk_size: {self.model_name} does not return its lm_head's output as its logits "
                "(it scales or soft-caps them), so the head cannot run per chunk; set train.logprob_chunk_size=0"
            )
        out = self.output[:, : self.targets.shape[1]]  # [B, T, k]
        return out[..., 0], out[..., 1] if self.with_entropy else None


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


@contextmanager
def head_in_chunks(model: torch.nn.Module, targets: torch.Tensor, temperature: float, with_entropy: bool,
                   chunk_size: int) -> Iterator[HeadChunks]:
    """Within the block, ``model``'s output head computes logprobs per chunk instead of logits;
    its own ``forward`` (an instance attribute, if it had one) is restored on every exit."""
    head = output_head(model)
    own = head.__dict__.get("forward")
    chunks = HeadChunks(head.forward, targets, temperature, with_entropy, chunk_size, type(model).__name__)
    head.forward = chunks
    try:
        yield chunks
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
