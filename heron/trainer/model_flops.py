"""Model FLOPs of a forward: the cost model behind ``train.share_prompts``' layout choice
(heron.trainer.shared_prompts) and the run's ``train/model_flops``, ``perf/train_tflops`` and
``perf/mfu`` (``tracking.peak_tflops``).

Why model FLOPs (the PaLM paper's appendix B; torchtitan and verl report the same figure): the
arithmetic the model's maths needs for the tokens, from the model's shape alone, so it compares
across kernels, layouts and machines. Work a kernel repeats or skips does not change it:
padding and activation checkpointing's recompute are not in it, and the prompt tokens that the
shared-prompt layout runs once per group, the output head at the prompt positions, which
heron.trainer.lm_head_chunks skips, and each row's last position, which heron.trainer.logprobs
does not run (it predicts nothing), are counted as if they ran.

A token costs ``per_token = 2 W`` FLOPs in the linear layers (W: every parameter but the input
embeddings, the output head included even when tied to them, norms too; one multiply-add each), and a
(query, key) pair of attention ``per_pair = 4 L A D`` (L layers of A heads of size D: the score
q.k and the weighted sum of v). A causal forward over a sequence of T tokens attends
P = T (T + 1) / 2 pairs. Its backward computes the gradient of every activation (a product per
forward product in the linears, two per forward product in attention) and of every trained
weight (``weight_grads_per_token = 2 W_trained``), so

    forward(T)  = per_token T + per_pair P
    training(T) = (2 per_token + weight_grads_per_token) T + 3 per_pair P

which is 3 forward(T) when every weight trains, and less with LoRA, whose frozen base weights get
no gradient (the first layer's input gradient, which a frozen embedding does not need, is still
counted). A mixture-of-experts model counts every expert's weights (an overestimate), and
sliding-window layers are counted as full causal attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class ForwardCost:
    """Estimated FLOPs of a forward: per token (linear layers) and per query-key pair (attention);
    and of a backward's weight gradients per token (None: every weight trains, ``per_token``).
    ``head_per_token`` is the output head's part of ``per_token`` (2 V H)."""

    per_token: float
    per_pair: float
    weight_grads_per_token: float | None = None
    head_per_token: float = 0.0

    def without_head(self) -> "ForwardCost":
        """The cost of the work that grows with a layout's positions when the output head runs at
        the answer positions only (heron.trainer.lm_head_chunks): every layout then runs the head
        at the same N positions, so ``train.share_prompts``' choice between layouts leaves it out.
        Not for ``train/model_flops``, which counts the head at every position (module docstring)."""
        return replace(self, per_token=self.per_token - self.head_per_token, head_per_token=0.0)

    def of(self, tokens: int, pairs: int) -> float:
        return tokens * self.per_token + pairs * self.per_pair

    def forward(self, lengths: torch.Tensor) -> torch.Tensor:
        """FLOPs of one causal forward over sequences of ``lengths`` [B] tokens -> a 0-d float tensor
        (on ``lengths``' device: summing needs no host sync)."""
        t = lengths.to(torch.float32)  # [B]
        return self.of(t, t * (t + 1) / 2).sum()

    def training(self, lengths: torch.Tensor) -> torch.Tensor:
        """FLOPs of one forward and its backward over sequences of ``lengths`` [B] tokens."""
        t = lengths.to(torch.float32)  # [B]
        weight_grads = self.per_token if self.weight_grads_per_token is None else self.weight_grads_per_token
        return ((2 * self.per_token + weight_grads) * t + 3 * self.per_pair * t * (t + 1) / 2).sum()


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
    embeddings is added as V x H. Either way ``head_per_token`` is its 2 V H."""
    config = model_config(model)
    embeddings = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    layers = [p for p in model.parameters() if id(p) not in embeddings]
    tied = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and id(m.weight) in embeddings]
    head_size = config.vocab_size * config.hidden_size  # V x H
    head = head_size if tied else 0
    trained_head = head if tied and tied[0].requires_grad else 0
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_pair = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim
    trained = sum(p.numel() for p in layers if p.requires_grad) + trained_head
    return ForwardCost(per_token=2.0 * (sum(p.numel() for p in layers) + head), per_pair=float(per_pair),
                       weight_grads_per_token=2.0 * trained,
                       head_per_token=2.0 * head_size)
