"""Regional ``torch.compile`` of the policy's decoder layers, and of the critic's backbone
(``train.compile``; heron.critic.build calls ``compile_decoder_layers`` on the value model's
backbone).

Why: in eager mode every elementwise op of a decoder layer (RMSNorm's five, RoPE's, the SwiGLU
activation, autocast's casts) and every op of their backward is a kernel of its own that reads
and writes a whole [B, T, hidden] activation. On a CPU those ops are ~a third of a bf16 train
step beside its matmuls (docs/speed.md). Inductor fuses them, forward and backward, and leaves
the matmuls to the same BLAS/oneDNN kernels.

Why regional: the layers of a decoder are one class run L times. Compiling each layer's call
(``nn.Module.compile``, in place, so parameter names and the state dict do not change) traces
one graph whose parameters are its inputs: every layer reuses it, and ``dynamic=True`` makes
the batch's rows and length symbolic, so one compile serves a run's batch shapes (as torchtitan
compiles its transformer blocks). The embeddings, the output head, the log-softmax and the loss
stay eager, where heron's own code (chunked head, shared-prompt attention dispatch) runs. A run
whose micro-batches switch between the padded and the shared-prompt layout (it shares where that
pays) compiles one graph for each; a shape far from the first can compile once more where
inductor guarded a size (docs/algorithms.md).

Cost: the first train step compiles (on 2 CPU cores ~40 s cold, 12-20 s from inductor's on-disk
cache; a forward under ``no_grad``, the pi_old recompute, compiles its own graph once more).
Measured (bench/compile.py, 2-core AMD EPYC): the train step at 0.85x the eager time on a 25 M
Qwen3 in bf16, 0.94x in float32; 0.72x and 0.89x on a 3.2 M one. Off by default: the compile
costs more than a short run (the toy demo) saves, and it changes the rounding.

With LoRA the adapters are traced inside the layers (the KL term's reference, the same layers with
the adapters disabled, gets a graph of its own). Not with ``train.gradient_checkpointing``:
``torch.utils.checkpoint`` runs a checkpointed layer with dynamo disabled, so the pair is refused
rather than silently trained eagerly.

Values: the same maths in another rounding order (a fused kernel keeps a bf16 op's intermediate
in float32 where eager rounds it), within the bounds of tests/unit/test_compile.py.
"""

from __future__ import annotations

import torch

from heron.lora import unwrap
from heron.trainer.grouped_attention import install as install_grouped_attention
from heron.trainer.model_flops import model_config

CHECKPOINTING_CONFLICT = (
    "torch.utils.checkpoint runs each checkpointed layer with dynamo disabled, so no layer would run compiled; "
    "set one of them to false"
)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of ``model`` (through a PEFT wrapper): the ``nn.ModuleList`` of
    ``config.num_hidden_layers`` modules of one class. [] when there is none."""
    config = model_config(model)
    count = getattr(config, "num_hidden_layers", None)
    for module in unwrap(model).modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count and len({type(m) for m in module}) == 1:
            return list(module)
    return []


def compile_decoder_layers(model: torch.nn.Module) -> int:
    """Compiles each decoder layer of ``model`` in place (module docstring); returns how many.
    Call it after the model is on its device and before data parallelism wraps it."""
    from heron.device import compile_toolchain_missing, separate_inductor_cache_per_capability

    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"train.compile: found no decoder-layer list in {type(unwrap(model)).__name__}; "
                         "set train.compile=false")
    if any(getattr(layer, "gradient_checkpointing", False) is True for layer in layers):
        raise ValueError(f"train.compile with activation checkpointing on: {CHECKPOINTING_CONFLICT}")
    missing = compile_toolchain_missing(next(model.parameters()).device)
    if missing is not None:
        raise RuntimeError(f"train.compile=true: {missing}; or set train.compile=false")
    separate_inductor_cache_per_capability()
    # dynamo guards the identity of the attention function a layer calls: register the
    # shared-prompt dispatcher before the first trace, not at the first shared batch, where it
    # would fail the padded graph's guard and cost a third graph
    install_grouped_attention()
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)
