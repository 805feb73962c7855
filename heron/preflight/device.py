"""Pre-flight of the device: a CUDA request this machine or Ray cluster cannot serve fails here,
in one line, before any model loads (``heron.device`` resolves the same request later)."""

from __future__ import annotations

import logging

from heron.config.root import HeronConfig

log = logging.getLogger("heron.preflight")


def check_device(cfg: HeronConfig) -> str:
    """Raises ``DeviceError`` for ``run.device=cuda`` without CUDA, or bf16 settings on a GPU
    without bfloat16 (local backend); returns the report line, with a note (also logged) when a
    CPU will emulate bf16. ``cluster.device=cuda`` is checked against the Ray cluster's GPUs by the
    placement pre-flight (``heron.cluster.placement.check_placeable``); the actors' GPUs are not
    probed for bf16 before they start."""
    from heron.device import bf16_note, check_available, native_bf16, resolve

    if cfg.cluster.backend == "ray":
        return f"device: cluster.device={cfg.cluster.device} (one device per placement bundle)"
    check_available(cfg.run.device, "run.device")
    device = resolve(cfg.run.device)
    line = f"device: run.device={cfg.run.device} -> {device}"
    note = bf16_note(bf16_requests(cfg), device.type, native_bf16(device))
    if note is None:
        return line
    log.warning("%s", note)
    return f"{line}; {note}"


def bf16_requests(cfg: HeronConfig) -> list[str]:
    """The settings of ``cfg`` that compute in bfloat16 on the run's device."""
    asked = [("model.dtype=bfloat16", cfg.model.dtype == "bfloat16"), ("train.precision=bf16", cfg.train.precision == "bf16"),
             ("engine.embedded.dtype=bfloat16", cfg.engine.kind == "embedded" and cfg.engine.embedded.dtype == "bfloat16")]
    return [key for key, on in asked if on]
