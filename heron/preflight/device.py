"""Pre-flight of the device: a CUDA request this machine or Ray cluster cannot serve fails here,
in one line, before any model loads (``heron.device`` resolves the same request later)."""

from __future__ import annotations

from heron.config.root import HeronConfig


def check_device(cfg: HeronConfig) -> str:
    """Raises ``DeviceError`` for ``run.device=cuda`` without CUDA (local backend); returns the
    report line. ``cluster.device=cuda`` is checked against the Ray cluster's GPUs by the
    placement pre-flight (``heron.cluster.placement.check_placeable``)."""
    from heron.device import check_available, resolve

    if cfg.cluster.backend == "ray":
        return f"device: cluster.device={cfg.cluster.device} (one device per placement bundle)"
    check_available(cfg.run.device, "run.device")
    return f"device: run.device={cfg.run.device} -> {resolve(cfg.run.device)}"
