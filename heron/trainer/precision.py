"""Mixed precision of the trainer's forward (``train.precision``).

bf16: the model's forward runs under ``torch.autocast(<the parameters' device type>, bfloat16)``:
matmuls and attention in bfloat16, reductions autocast keeps in float32. Master weights stay
float32 (autocast casts a bf16 copy per op; gradients flow back to the float32 parameters, so
grads and AdamW state are float32 too). The logits leave the forward and everything after them
-- log-softmax, logprobs, entropy, the loss -- is float32 (heron.trainer.logprobs).

Device-generic: the device type is read from the model's parameters, so the same code runs on
CPU (bf16 autocast; fast where the CPU has avx512-bf16/AMX) and on GPUs. Inside it, the
attention kernel is chosen per forward (heron.trainer.attention_kernel).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable

import torch

from heron.trainer.attention_kernel import BACKENDS, attention_context

AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
ForwardContext = Callable[[int], AbstractContextManager]  # positions of the forward -> its context


def plain_forward(length: int) -> AbstractContextManager:
    """No autocast, torch's own attention kernel: the default ``ForwardContext``."""
    return nullcontext()


def forward_context(precision: str, model: torch.nn.Module, attention_backend: str = "auto") -> ForwardContext:
    """A factory of the context a forward of the model over ``length`` positions runs in (a fresh
    one per forward): autocast for ``precision``, then the attention kernel
    (``train.attention_backend``, heron.trainer.attention_kernel)."""
    if precision != "fp32" and precision not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown train.precision {precision!r}; use fp32 or bf16")
    if attention_backend not in BACKENDS:
        raise ValueError(f"unknown train.attention_backend {attention_backend!r}; use one of {BACKENDS}")

    @contextmanager
    def context(length: int):
        # the device is read at each forward: the model may be placed after the trainer is built
        autocast = (torch.autocast(device_type=next(model.parameters()).device.type, dtype=AUTOCAST_DTYPES[precision])
                    if precision in AUTOCAST_DTYPES else nullcontext())
        with autocast, attention_context(attention_backend, model, length):  # the kernel sees autocast's dtype
            yield

    return context
