"""What leaving zero-advantage rows out of the train step saves on a task that learns (issue 14.2).

The demo (heron/toy/demo.yaml: 16 prompts x 8 samples, two optimizer steps per rollout, GRPO):
one SFT warm start, then the same seeded RL run twice, ``train.skip_zero_advantage=true`` and
``false``, one after the other in this process. As the policy learns, more groups are all right
(and early on, all wrong): their rows have advantage 0 and no gradient
(heron.trainer.zero_advantage). Printed per run: the train stage's total seconds
(``time/train_s``, the pi_old forward of the two steps included), the share of rows left out
(``train/zero_advantage_skipped``, mean over rollouts), the mean reward of the last 10 rollouts
and the last eval accuracy -- the skip changes only float summation order, so both runs learn
alike (not bit for bit: the order differences grow over 60 rollouts). Last line:
``zero_advantage: train_s_skip_vs_every_row=<ratio>`` (< 1: the skip is faster).

    OMP_NUM_THREADS=2 .venv/bin/python bench/zero_advantage.py [--rollouts 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heron.config.root import load_config  # noqa: E402
from heron.loop import train  # noqa: E402
from heron.toy.demo_assets import warm_start  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "heron" / "toy" / "demo.yaml"


def rl_run(base: list[str], run_dir: Path, skip: bool, rollouts: int) -> dict[str, float]:
    """One RL run from the warm start's overrides ``base``, in its own ``run_dir``."""
    cfg = load_config(str(DEMO), [*base, f"run.dir={run_dir}", f"train.skip_zero_advantage={str(skip).lower()}",
                                  f"rollout.num_rollouts={rollouts}"])
    records = train(cfg)
    rollout_records = [r for r in records if "time/train_s" in r]
    evals = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
    return {
        "train_s": sum(r["time/train_s"] for r in rollout_records),
        "skipped": statistics.fmean(r.get("train/zero_advantage_skipped", 0.0) for r in rollout_records),
        "reward_last10": statistics.fmean(r["reward/mean"] for r in rollout_records[-10:]),
        "eval": evals[-1] if evals else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = warm_start(Path(tmp) / "warm_start", str(DEMO), [])
        runs = {name: rl_run(base, Path(tmp) / name, name == "skip", args.rollouts) for name in ("skip", "every_row")}
    for name, r in runs.items():
        print(f"zero_advantage [{name}]: train stage {r['train_s']:.1f} s over {args.rollouts} rollouts, rows left out "
              f"{100 * r['skipped']:.1f} %, reward (last 10) {r['reward_last10']:.3f}, eval accuracy {r['eval']:.3f}")
    print(f"zero_advantage: train_s_skip_vs_every_row={runs['skip']['train_s'] / runs['every_row']['train_s']:.2f}")


if __name__ == "__main__":
    main()
