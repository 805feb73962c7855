"""``train.reshard_after_forward=false`` (each FSDP2 decoder layer keeps its gathered weights from
its forward to its backward: one all-gather a micro-batch instead of two) against the default
(true: freed after the forward, gathered again for the backward), side by side in one run.

The setting of bench/fsdp_precision.py: two real gloo ranks (FSDP2, one thread each), the 25 M
bench model, 16 rows of ~37 tokens a rank, ``train.precision=bf16`` with the weights gathered in
bfloat16, one DataParallelTrainer step a call, alternated after a warm-up. Per variant: the
median step time and the bytes one step's all-gathers moved a rank. The last line is
``fsdp_reshard: train_step_s_kept_vs_resharded=<ratio> (all-gather bytes <ratio>; ...)`` (< 1:
faster, fewer bytes).

    .venv/bin/python bench/fsdp_reshard.py [--repeats 4] [--model 25M|3.2M]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fsdp_precision import run  # noqa: E402

VARIANTS = {"resharded": {"precision": "bf16", "reshard_after_forward": True},
            "kept": {"precision": "bf16", "reshard_after_forward": False}}


if __name__ == "__main__":
    run("fsdp_reshard", VARIANTS, "kept", "resharded", "train_step_s_kept_vs_resharded")
