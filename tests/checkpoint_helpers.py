"""Helpers shared by the checkpoint tests."""

import threading

import torch


def model_and_optimizer(seed: int = 0, width: int = 16):
    """A tiny model and an AdamW that has taken one step (so it has state to save)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, width)).square().sum().backward()
    optimizer.step()
    return model, optimizer


def held_staging(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Makes the async save's host copy start only once the returned ``release`` is set (and
    set ``started`` when it is reached), so a test can act while the copy is pending."""
    started, release = threading.Event(), threading.Event()
    from heron.checkpoint import dcp_io

    stage = dcp_io.stage

    def held_stage(*args, **kwargs):
        started.set()
        assert release.wait(timeout=60), "the test never released the staging copy"
        return stage(*args, **kwargs)

    monkeypatch.setattr(dcp_io, "stage", held_stage)
    return started, release
