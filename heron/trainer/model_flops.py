"""Model FLOPs of a forward: the cost model behind ``train.share_prompts``' layout choice
(heron.trainer.shared_prompts) and the run's ``train/model_flops``, ``perf/train_tflops`` and
``perf/mfu`` (``tracking.peak_tflops``).

Why model FLOPs (the PaLM paper's appendix B; torchtitan and verl report the same figure): the
arithmetic the model's maths needs for the tokens, from the model's shape alone, so it compares
across kernels, layouts and machines. Work a kernel repeats or skips does not change it:
padding, activation checkpointing's recompute and the prompt tokens that the shared-prompt
layout runs once per group are not in it.

A token costs ``per_token = 2 W`` FLOPs in the linear layers (W: every parameter but the input
embeddings, the output head included even when tied to them, norms too; one multiply-add each), and a
(query, key) pair of attention ``per_pair = 4 L A D`` (L layers of A heads of size D: the score
q.k and the weighted sum of v). A causal forward over a sequence of T tokens attends
T (T + 1) / 2 pairs, so

    forward(T)  = per_token T + per_pair T (T + 1) / 2
    training(T) = 3 forward(T)        (the backward computes two products for each of the forward's)

A mixture-of-experts model counts every expert's weights (an overestimate), and sliding-window
layers are counted as full causal attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ForwardCost:
    """Estimated FLOPs of a forward: per token (linear layers) and per query-key pair (attention)."""

    per_token: float
    per_pair: float

    def of(self, tokens: int, pairs: int) -> float:
        return tokens * self.per_token + pairs * self.per_pair

    def forward(self, lengths: torch.Tensor) -> torch.Tensor:
        """FLOPs of one causal forward over sequences of ``lengths`` [B] tokens -> a 0-d float tensor
        (on ``lengths``' device: summing needs no host sync)."""
        t = lengths.to(torch.float32)  # [B]
        return (self.per_token * t + self.per_pair * t * (t + 1) / 2).sum()

    def training(self, lengths: torch.Tensor) -> torch.Tensor:
        """FLOPs of one forward and its backward over sequences of ``lengths`` [B] tokens."""
        return 3 * self.forward(lengths)


def model_config(model: torch.nn.Module):
    """The HF config of ``model``, through a DDP/FSDP or PEFT wrapper (PEFT forwards attributes)."""
    for candidate in (model, getattr(model, "module", None)):
        config = getattr(candidate, "config", None)
        if config is not None:
            return config
    return None


def forward_cost(model: torch.nn.Module) -> ForwardCost:
    """``model``'s per-token and per-pair FLOPs (module docstring). The output head counts once:
    a separate head is among the non-embedding parameters already; a head tied to the input
    embeddings is added as V x H."""
    config = model_config(model)
    embeddings = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    layer_params = sum(p.numel() for p in model.parameters() if id(p) not in embeddings)
    tied = any(isinstance(m, torch.nn.Linear) and id(m.weight) in embeddings for m in model.modules())
    head = config.vocab_size * config.hidden_size if tied else 0
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_pair = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim
    return ForwardCost(per_token=2.0 * (layer_params + head), per_pair=float(per_pair))
