"""Pre-flight of the device: a CUDA request this machine or Ray cluster cannot serve fails here,
in one line, before any model loads (``heron.device`` resolves the same request later)."""

from __future__ import annotations

import logging

from heron.config.root import HeronConfig

log = logging.getLogger("heron.preflight")


def check_device(cfg: HeronConfig) -> str:
    """Raises ``DeviceError`` for ``run.device=cuda`` without CUDA, or bf16 settings on a device
    without bfloat16 (local backend; a CPU only unless ``run.allow_emulated_bf16``); returns the
    report line, with a note (also logged) when a CPU will emulate bf16. On Ray,
    ``cluster.device=cuda`` is checked against the cluster's GPUs by the placement pre-flight
    (``heron.cluster.placement.check_placeable``), and bf16 by each actor on its own device as it
    builds its component (``heron.device.check_bf16``), before any forward."""
    from heron.device import check_available, check_bf16, resolve

    if cfg.cluster.backend == "ray":
        return f"device: cluster.device={cfg.cluster.device} (one device per placement bundle)"
    check_available(cfg.run.device, "run.device")
    device = resolve(cfg.run.device)
    line = f"device: run.device={cfg.run.device} -> {device}"
    note = check_bf16(bf16_requests(cfg), device, allow_emulated=cfg.run.allow_emulated_bf16)
    if note is None:
        return line
    log.warning("%s", note)
    return f"{line}; {note}"


def bf16_requests(cfg: HeronConfig) -> list[str]:
    """The settings of ``cfg`` that compute in bfloat16 on the run's device."""
    engine_dtype = (cfg.engine.embedded.dtype or cfg.model.dtype) if cfg.engine.kind == "embedded" else None
    return component_bf16_requests(cfg.model.dtype, cfg.train.precision, engine_dtype)


def component_bf16_requests(model_dtype: str, precision: str | None = None, engine_dtype: str | None = None) -> list[str]:
    """The bfloat16 settings among one component's: ``model.dtype`` and ``train.precision`` (trainer,
    critic), the embedded engine's effective dtype (``engine.embedded.dtype``, else ``model.dtype``)."""
    asked = [("model.dtype=bfloat16", model_dtype == "bfloat16"), ("train.precision=bf16", precision == "bf16"),
             ("engine.embedded.dtype=bfloat16", engine_dtype == "bfloat16" and model_dtype != "bfloat16")]
    return [key for key, on in asked if on]
