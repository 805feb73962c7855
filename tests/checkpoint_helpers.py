"""Helpers shared by the checkpoint tests."""

import torch


def model_and_optimizer(seed: int = 0, width: int = 16):
    """A tiny model and an AdamW that has taken one step (so it has state to save)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, width)).square().sum().backward()
    optimizer.step()
    return model, optimizer
