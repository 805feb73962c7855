"""Non-finite training values: an inf/nan loss or gradient norm must never reach the weights.

An optimizer step on a NaN gradient turns every parameter it touches into NaN, and AdamW
keeps the NaN in its moments forever after; from there on the run trains (and checkpoints)
garbage while exiting 0. The trainer therefore checks the mini-batch loss and the global
gradient norm *between* backward and ``optimizer.step()``: with ``train.on_nonfinite=error``
it stops with ``NonFiniteError`` (nothing applied), with ``skip`` it zeroes the gradients and
skips that optimizer step and its LR-schedule step (as Megatron and DeepSpeed do on overflow),
counted in ``train/nonfinite_skipped``.

Data-parallel ranks decide together: the gradient norm is global already (DDP all-reduces the
gradients; FSDP2's norm is the full tensor of all shards), and ``DataParallelTrainer`` also
all-reduces the verdict so a loss that is non-finite on one rank alone stops or skips every
rank at the same step.
"""

from __future__ import annotations

import math

from heron.errors import UserError


class NonFiniteError(UserError):
    """The loss or the gradient norm of a mini-batch was inf or nan; nothing was applied."""


def nonfinite_values(**values: float) -> str:
    """``"loss=nan grad_norm=inf"`` for the values that are not finite; empty when all are."""
    return " ".join(f"{name}={value}" for name, value in values.items() if not math.isfinite(value))


def nonfinite_error(found: str, rollout_id: int, step: int, num_steps: int) -> NonFiniteError:
    return NonFiniteError(
        f"non-finite {found} in optimizer step {step + 1}/{num_steps} of rollout {rollout_id}; the step was "
        f"not applied and the weights are unchanged. Lower train.lr, check rewards and advantages (or the "
        f"custom loss), or set train.on_nonfinite=skip to skip such steps"
    )
