"""The AdamW of a trained module (the policy's, the critic's), and the tensors the pair holds,
by residency category (``Holdings`` inventories: gathered at each sleep, so lazily created
optimizer state is included)."""

from __future__ import annotations

import torch


def build_adamw(module: torch.nn.Module, cfg) -> torch.optim.AdamW:
    """AdamW over ``module``'s trained parameters (those that require gradients: all of them, or
    LoRA's adapters) from a config with lr, betas, eps and weight_decay."""
    trained = [p for p in module.parameters() if p.requires_grad]
    return torch.optim.AdamW(trained, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def trained_tensors(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, list[torch.Tensor]]:
    """params, grads, optimizer state and buffers of a module and its optimizer."""
    params = list(module.parameters())
    return {
        "params": params,
        "grads": [p.grad for p in params if p.grad is not None],
        "optimizer": [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)],
        "buffers": list(module.buffers()),
    }
