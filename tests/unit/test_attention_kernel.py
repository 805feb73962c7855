"""train.attention_backend (heron.trainer.attention_kernel): which SDPA kernel a training forward
runs, and that the math kernel it picks for short bf16 CPU forwards gives the same logprobs up
to summation order (within the derived bf16 bound of float32, tests/tolerance.py)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import profile
from transformers import AutoModelForCausalLM

from heron.trainer.attention_kernel import MATH_MAX_LENGTH, uses_math_kernel
from heron.trainer.logprobs import forward_logprobs
from heron.trainer.precision import forward_context
from tests.tolerance import assert_bf16_logprobs_close
from tests.unit.test_trainer import _rollout

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


def test_the_rule_picks_math_only_for_short_differentiated_bf16_cpu_forwards():
    model = torch.nn.Linear(2, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert uses_math_kernel("auto", model, MATH_MAX_LENGTH)
        assert not uses_math_kernel("auto", model, MATH_MAX_LENGTH + 1)  # flash's backward wins on long ones
        assert not uses_math_kernel("torch", model, 8)
        with torch.no_grad():  # no backward: flash's forward is the faster one
            assert not uses_math_kernel("auto", model, 8)
    assert not uses_math_kernel("auto", model, 8)  # float32: torch's choice
    assert uses_math_kernel("auto", model.to(torch.bfloat16), 8)  # pure bf16 weights
    model.gradient_checkpointing = True  # as transformers marks checkpointed modules
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not uses_math_kernel("auto", model, 8)  # the recompute would run outside the choice
    with pytest.raises(ValueError, match="unknown train.attention_backend 'fast'; use one of"):
        uses_math_kernel("fast", model, 8)


def _attention_ops(model, batch, backend: str) -> set[str]:
    """Names of the ops a differentiated bf16 training forward + backward ran."""
    context = forward_context("bf16", model, backend)
    with profile() as prof:
        logprobs, _ = forward_logprobs(model, batch.input_ids, batch.attention_mask, forward_context=context)
        logprobs.sum().backward()
    return {event.key for event in prof.key_averages()}


def test_the_trainer_forward_really_switches_kernel(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    assert batch.input_ids.shape[1] <= MATH_MAX_LENGTH
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    assert FLASH in _attention_ops(model, batch, "torch")
    assert FLASH not in _attention_ops(model, batch, "auto")


@pytest.mark.portability
def test_math_kernel_logprobs_are_within_the_bf16_bound(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    ids, mask = batch.input_ids, batch.attention_mask
    with torch.no_grad():
        expected, _ = forward_logprobs(model, ids, mask)  # float32, torch's kernel
    results = {}
    for backend in ("auto", "torch"):
        logprobs, _ = forward_logprobs(model, ids, mask, forward_context=forward_context("bf16", model, backend))
        results[backend] = logprobs.detach()
        assert_bf16_logprobs_close(results[backend], expected, model.config)
    assert not torch.equal(results["auto"], results["torch"])  # two kernels really ran
