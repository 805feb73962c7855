"""Which scaled-dot-product-attention kernel a training forward runs (``train.attention_backend``).

Why: torch 2.13's CPU flash-attention *backward* in bfloat16 pays a fixed cost per (row x head)
and query block, whatever the sequence length: measured on a 2-core AMX machine (B=32 rows,
H=8 heads, T=37, D=64, fwd+bwd) flash took 62 ms against 15 ms for the math kernel (the
composite matmul -> softmax -> matmul), 32 against 16 ms at T=64, 34 against 18 at T=128, and
18 against 21 at T=192; on a 2-core AMD EPYC (avx512-bf16, no AMX; B=8 rows x H=8 at T=128..136,
fewer rows beyond) 24-27 against 13-16 ms at T=128-136, 21 against 15 at T=160, even at T=192-224
and flash ahead from T=256. In float32 the two are within ~30 % either way and the forward alone
is faster with flash everywhere (bench/attention_kernel.py). RL rollouts are often short, so
under ``auto`` a forward that will be differentiated (autograd on), on a CPU, in bfloat16
(autocast or bfloat16 weights), over at most ``MATH_MAX_LENGTH`` positions, without activation
checkpointing (its recompute would run outside the choice) runs the math kernel; every other forward keeps torch's own choice (flash on CPU; flash / cuDNN /
memory-efficient on GPUs), and ``torch`` always does.

Same values up to summation order: both kernels compute softmax(q k^T / sqrt(d) + mask) v,
with a float32 softmax, so their logprobs lie within the same bf16 bound of float32
(tests/unit/test_attention_kernel.py). The math kernel holds the [B, H, T, T] scores for the
backward, which is what bounds it to short sequences.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

MATH_MAX_LENGTH = 160  # below both machines' measured crossovers (above): flash's backward wins from ~192-256 positions on
BACKENDS = ("auto", "torch")


def uses_math_kernel(backend: str, model: torch.nn.Module, length: int) -> bool:
    """Whether a forward of ``model`` over ``length`` positions, entered now, gets the math kernel."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown train.attention_backend {backend!r}; use one of {BACKENDS}")
    if backend == "torch" or length > MATH_MAX_LENGTH or not torch.is_grad_enabled() or _checkpointed(model):
        return False
    param = next(model.parameters())
    if param.device.type != "cpu":
        return False
    autocast_bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    return autocast_bf16 or param.dtype == torch.bfloat16


def _checkpointed(model: torch.nn.Module) -> bool:
    """Activation checkpointing on (transformers marks its modules): the backward's recompute runs
    outside this context, so it would pick the other kernel and fail checkpointing's metadata check."""
    return any(getattr(module, "gradient_checkpointing", False) is True for module in model.modules())


def attention_context(backend: str, model: torch.nn.Module, length: int) -> AbstractContextManager:
    """The SDPA kernel context for one forward; enter it inside the precision context (autocast)."""
    return sdpa_kernel([SDPBackend.MATH]) if uses_math_kernel(backend, model, length) else nullcontext()
