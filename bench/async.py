"""Wall time per rollout, sync vs one-step off-policy async, in one run on one Ray session.

Disaggregated placement (1 trainer rank, 1 engine actor, one CPU bundle each), toy addition
task, the same config in both modes. In async mode generation of rollout k+1 overlaps
training on rollout k, so a rollout costs ~max(generate, train) instead of their sum.
The first rollout of each mode (actor warm-up, no overlap yet) is excluded. The last line is
``async: rollout_s sync=<s> async=<s> speedup=<sync / async>``.

    OMP_NUM_THREADS=1 RAY_AUTH_MODE=disabled .venv/bin/python bench/async.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

NUM_ROLLOUTS = 8
SETTINGS = [
    "rollout.batch_size=8", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=24",
    "train.micro_batch_size=8", "train.steps_per_rollout=2", "eval.path=", "tracking.progress=false",
    "tracking.summary=false", "checkpoint.enabled=false", "cluster.backend=ray", "cluster.cpus_per_bundle=1", "colocate=false",
    f"rollout.num_rollouts={NUM_ROLLOUTS}",
]


def _per_rollout(records: list[dict], wall_s: float) -> dict[str, float]:
    steady = records[1:]
    return {
        "rollout_s": statistics.median(r["time/rollout_s"] for r in steady),
        "generate_s": statistics.median(r["time/generate_s"] for r in steady),
        "train_s": statistics.median(r["time/train_s"] for r in steady),
        "push_s": statistics.median(r["time/push_weights_s"] for r in steady),
        "wall_s": wall_s,
    }


def main() -> None:
    import ray

    from heron.cluster.ray_session import start_local_ray
    from heron.config.root import load_config
    from heron.loop import train
    from heron.toy.demo_assets import create_demo_assets

    start_local_ray(num_cpus=2, log_to_driver=False)  # loopback only, no dashboard
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            assets = create_demo_assets(Path(tmp))
            for mode in ("sync", "async"):
                cfg = load_config(None, [
                    f"model.path={assets['model']}", f"data.path={assets['train']}", f"run.dir={tmp}/{mode}",
                    f"loop.mode={mode}", *SETTINGS,
                ])
                start = time.perf_counter()
                records = train(cfg)
                results[mode] = _per_rollout(records, time.perf_counter() - start)
                print(f"{mode:>5}: " + " ".join(f"{k}={v:.3f}" for k, v in results[mode].items()), flush=True)
    finally:
        ray.shutdown()
    sync_s, async_s = results["sync"]["rollout_s"], results["async"]["rollout_s"]
    print(f"async: rollout_s sync={sync_s:.3f} async={async_s:.3f} speedup={sync_s / async_s:.2f}")


if __name__ == "__main__":
    main()
