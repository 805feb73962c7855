"""Mixed precision of the trainer's forward (``train.precision``).

bf16: the model's forward runs under ``torch.autocast(<the parameters' device type>, bfloat16)``:
matmuls and attention in bfloat16, reductions autocast keeps in float32. Master weights stay
float32 (autocast casts a bf16 copy per op; gradients flow back to the float32 parameters, so
grads and AdamW state are float32 too). The logits leave the forward and everything after them
-- log-softmax, logprobs, entropy, the loss -- is float32 (heron.trainer.logprobs).

Device-generic: the device type is read from the model's parameters, so the same code runs on
CPU (bf16 autocast; fast where the CPU has avx512-bf16/AMX) and on GPUs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16}


def forward_context(precision: str, model: torch.nn.Module) -> Callable[[], AbstractContextManager]:
    """A factory of the context the model's forward runs in (a fresh one per forward)."""
    if precision == "fp32":
        return nullcontext
    if precision not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown train.precision {precision!r}; use fp32 or bf16")
    dtype = AUTOCAST_DTYPES[precision]
    # the device is read at each forward: the model may be placed after the trainer is built
    return lambda: torch.autocast(device_type=next(model.parameters()).device.type, dtype=dtype)
