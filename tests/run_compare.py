"""What two runs that must be bit-identical are compared on: their metric records without wall
times, device-memory figures (they differ with offload) and the engine/trainer logprob mismatch.
The engine's own logprobs feed only that metric (the trainer recomputes the ones it trains on),
and they differ at float round-off between memory layouts: offload gives the engine's weights
fresh storages, and the CPU kernels' summation can differ with alignment. Each such test bounds
the mismatch separately instead."""

from __future__ import annotations

ROUNDOFF_METRICS = ("train/engine_logprob_abs_diff_mean", "train/engine_logprob_abs_diff_max")


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(("time/", "memory/")) and k not in ROUNDOFF_METRICS}
