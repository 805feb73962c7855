"""train.attention_backend: the training forward + backward with heron's kernel rule (auto) against
torch's own choice, side by side in one run (issue 14).

Two parts. (1) The kernels alone: fwd+bwd of SDPA with a padding + causal mask, flash against
math, float32 and bfloat16, B x T = ~1200 positions, H=8, D=64, at several T: where the
``MATH_MAX_LENGTH`` crossover of heron.trainer.attention_kernel comes from. (2) The 3.2 M and
25 M bench models (bench/vs_trl.py): one bf16-autocast forward + backward of the logprobs of 32
rows x 37 tokens (bench/vs_trl.py's batch), ``auto`` and ``torch`` alternating, medians. The last
lines are ``attention_kernel: train_step_auto_vs_torch=<auto s / torch s>  [model]`` (< 1: faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/attention_kernel.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.side_by_side import skips_emulated_bf16  # noqa: E402
from bench.vs_trl import MODELS  # noqa: E402
from heron.toy.addition import make_prompts  # noqa: E402
from heron.toy.model import create_toy_model  # noqa: E402
from heron.trainer.logprobs import forward_logprobs  # noqa: E402
from heron.trainer.precision import forward_context  # noqa: E402

ROWS, LENGTH, REPEATS = 32, 37, 7


def _median_ms(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def kernels() -> None:
    heads, dim = 8, 64
    print("kernels: SDPA fwd+bwd ms, flash / math (B x T ~ 1200, H=8, D=64, padding + causal mask)")
    for rows, length in [(32, 37), (16, 64), (8, 128), (6, 160), (4, 192), (4, 256)]:
        line = []
        for dtype in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(rows, heads, length, dim, dtype=dtype, requires_grad=True) for _ in range(3))
            keep = torch.tril(torch.ones(length, length, dtype=torch.bool))[None, None].repeat(rows, 1, 1, 1)
            keep[:, :, :, :3] = False
            keep |= torch.eye(length, dtype=torch.bool)  # every row sees itself

            def run(backend):
                def step():
                    with sdpa_kernel([backend]):
                        F.scaled_dot_product_attention(q, k, v, attn_mask=keep).sum().backward()
                return step
            flash, math = _median_ms(run(SDPBackend.FLASH_ATTENTION)), _median_ms(run(SDPBackend.MATH))
            line.append(f"{str(dtype)[6:]} {flash:6.1f} / {math:6.1f}")
        print(f"  B={rows:>2} T={length:>3}: " + "   ".join(line))


def train_step(name: str, tmp: Path) -> float:
    corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(create_toy_model(tmp / name, corpus, MODELS[name]), dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (ROWS, LENGTH), generator=g)  # [B, L]
    mask = torch.ones_like(ids)
    mask[ROWS // 2:, LENGTH - 8:] = 0  # right padding on half the rows, as collated batches have
    times: dict[str, list[float]] = {"auto": [], "torch": []}
    for _ in range(REPEATS):
        for backend in times:
            context = forward_context("bf16", model, backend)

            def step():
                logprobs, _ = forward_logprobs(model, ids, mask, forward_context=context)
                (logprobs * mask[:, 1:]).sum().backward()
            times[backend].append(_median_ms(step, repeats=1))
    auto, plain = statistics.median(times["auto"]), statistics.median(times["torch"])
    print(f"  {name}: bf16 fwd+bwd {ROWS} x {LENGTH}: auto {auto:.0f} ms, torch {plain:.0f} ms")
    return auto / plain


def main() -> None:
    if skips_emulated_bf16("attention_kernel"):  # the kernel choice it measures is bf16's
        return
    kernels()
    with tempfile.TemporaryDirectory() as tmp:
        ratios = {name: train_step(name, Path(tmp)) for name in ("3M", "25M")}
    for name, ratio in ratios.items():
        print(f"attention_kernel: train_step_auto_vs_torch={ratio:.2f}  [{name}]")


if __name__ == "__main__":
    main()
