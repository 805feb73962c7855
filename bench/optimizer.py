"""AdamW step time: torch's fused kernel (what heron.trainer.optimizer builds on CPU and CUDA)
against the default multi-tensor (foreach) one, side by side in one run, and how far their
updates differ (the same formula, another rounding order).

The parameters have the shapes of the bench models (bench/vs_trl.py's 3.2 M and 25 M), float32
gradients drawn once per step, six steps each, the median step. The last lines are
``optimizer: fused_vs_foreach=<fused s / foreach s>  [model]`` (< 1: faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/optimizer.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.vs_trl import MODELS  # noqa: E402

STEPS = 6


def _shapes(spec) -> list[tuple[int, ...]]:
    h, i, heads, kv = spec.hidden_size, spec.intermediate_size, spec.num_heads, spec.num_kv_heads
    d = h // heads
    layer = [(heads * d, h), (kv * d, h), (kv * d, h), (h, heads * d), (i, h), (i, h), (h, i), (h,), (h,), (d,), (d,)]
    return [(spec.vocab_size, h)] + layer * spec.num_layers + [(h,)]


def _run(shapes, **kind) -> tuple[float, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kind)
    times = []
    for _ in range(STEPS):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), [p.detach() for p in params]


def main() -> None:
    ratios = {}
    for name in ("3M", "25M"):
        shapes = _shapes(MODELS[name])
        numel = sum(torch.Size(s).numel() for s in shapes)
        foreach, ref = _run(shapes, foreach=True)
        fused, out = _run(shapes, fused=True)
        diff = max(float((a - b).abs().max()) for a, b in zip(out, ref))
        print(f"  {name} ({numel / 1e6:.1f} M params): foreach {1e3 * foreach:.1f} ms, fused {1e3 * fused:.1f} ms, "
              f"max |fused - foreach| after {STEPS} steps {diff:.2g}")
        ratios[name] = fused / foreach
    for name, ratio in ratios.items():
        print(f"optimizer: fused_vs_foreach={ratio:.2f}  [{name}]")


if __name__ == "__main__":
    main()
