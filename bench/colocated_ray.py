"""Cost of colocation across Ray actors: remote sleep/wake cycles, and wall time per rollout
colocated (offload on, actors take turns per bundle) vs disaggregated (no offload).

2 trainer ranks (FSDP2) + 1 engine actor, toy addition task, the same config in both
placements. The first rollout (actor warm-up) is excluded. The last line is
``colocated_ray: rollout_s colocated=<s> disaggregated=<s> cycle_ms engine=<ms> trainer_rank=<ms>``.

    OMP_NUM_THREADS=1 RAY_AUTH_MODE=disabled .venv/bin/python bench/colocated_ray.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

NUM_ROLLOUTS = 6
NUM_CYCLES = 20
SETTINGS = [
    "rollout.batch_size=4", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8", "train.micro_batch_size=1",
    "train.steps_per_rollout=2", "eval.path=", "tracking.progress=false", "tracking.summary=false",
    "checkpoint.enabled=false", "cluster.backend=ray", "train.world_size=2", "cluster.cpus_per_bundle=0.5",
    f"rollout.num_rollouts={NUM_ROLLOUTS}",
]


def _cycle_ms(member) -> float:
    """Median wall time of one remote wake + sleep of an actor, through its driver proxy."""
    times = []
    for _ in range(NUM_CYCLES):
        start = time.perf_counter()
        member.wake()
        member.sleep()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _rollout_s(cfg, measure_cycles: bool) -> tuple[float, dict[str, float]]:
    from heron.rl_run import RLRun

    times, cycles = [], {}
    with RLRun(cfg) as run:
        for rollout_id in run.rollout_ids():
            start = time.perf_counter()
            run.train(run.advantages(run.reward(run.generate(rollout_id))))
            run.push_weights()
            times.append(time.perf_counter() - start)
        if measure_cycles:
            cycles = {"engine": _cycle_ms(run.c.engine.residency.members[0]),
                      "trainer_rank": _cycle_ms(run.c.trainer.residency.members[0])}
    return statistics.median(times[1:]), cycles


def main() -> None:
    import ray

    from heron.cluster.ray_session import start_local_ray
    from heron.config.root import load_config
    from heron.toy.demo_assets import create_demo_assets

    start_local_ray(num_cpus=2, log_to_driver=False)  # loopback only, no dashboard
    try:
        with tempfile.TemporaryDirectory() as tmp:
            assets = create_demo_assets(Path(tmp))
            results = {}
            for placement, colocate in (("colocated", "true"), ("disaggregated", "false")):
                cfg = load_config(None, [
                    f"model.path={assets['model']}", f"data.path={assets['train']}", f"run.dir={tmp}/{placement}",
                    f"colocate={colocate}", *SETTINGS,
                ])
                results[placement] = _rollout_s(cfg, measure_cycles=colocate == "true")
                print(f"{placement}: rollout_s={results[placement][0]:.3f}", flush=True)
    finally:
        ray.shutdown()
    cycles = results["colocated"][1]
    print(f"colocated_ray: rollout_s colocated={results['colocated'][0]:.3f} "
          f"disaggregated={results['disaggregated'][0]:.3f} cycle_ms engine={cycles['engine']:.1f} "
          f"trainer_rank={cycles['trainer_rank']:.1f}")


if __name__ == "__main__":
    main()
