"""heron.trainer.optimizer: the trainer's AdamW is torch's fused kernel where torch has one, and
its update equals the multi-tensor kernel's up to float32 rounding."""

from __future__ import annotations

import torch

from heron.config.train import TrainConfig
from heron.device import fused_optimizer_supported
from heron.trainer.optimizer import build_adamw
from tests.tolerance import U


def test_plain_cpu_parameters_get_the_fused_kernel():
    model = torch.nn.Linear(4, 3)
    assert fused_optimizer_supported(list(model.parameters()))
    assert build_adamw(model, TrainConfig()).param_groups[0]["fused"] is True
    assert not fused_optimizer_supported([])
    assert not fused_optimizer_supported([torch.zeros(2, dtype=torch.int64)])


def test_fused_update_equals_foreach_up_to_rounding():
    """One step from the same weights and gradients: both compute theta - lr (m_hat / (sqrt(v_hat)
    + eps) + wd theta) with a handful of roundings each, so per element they differ by at most
    a few units of float32 round-off of |theta| + lr (|m_hat / sqrt(v_hat)| = 1 at step 1)."""
    g = torch.Generator().manual_seed(0)
    weights, grad = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    cfg = TrainConfig(lr=1e-2, weight_decay=0.1)
    results = []
    for fused in (True, False):
        model = torch.nn.Linear(32, 64, bias=False)
        with torch.no_grad():
            model.weight.copy_(weights)
        optimizer = build_adamw(model, cfg)
        if not fused:
            optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                                          weight_decay=cfg.weight_decay, foreach=True)
        model.weight.grad = grad.clone()
        optimizer.step()
        results.append(model.weight.detach().clone())
    fused_w, foreach_w = results
    assert not torch.equal(fused_w, weights)
    assert ((fused_w - foreach_w).abs() <= 8 * U * (weights.abs() + cfg.lr)).all()
