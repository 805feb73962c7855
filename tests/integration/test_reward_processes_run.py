"""A run with ``reward.processes`` (heron.reward.process_pool): its metrics equal the same run
scoring in this process, and its reward workers are gone when the run ends."""

from __future__ import annotations

from pathlib import Path

from heron.config.root import load_config
from heron.loop import run_rollouts
from heron.rl_run import RLRun
from tests.run_compare import comparable
from tests.toy_run import toy_run_overrides

HOOK = '''
def reward(prompt, response):
    return sum(map(ord, response)) % 7 / 6  # varies between samples, so advantages and updates do
'''


def _run(toy_model_dir, toy_data_path, run_dir: Path, hook: Path, processes: int):
    cfg = load_config(None, toy_run_overrides(
        toy_model_dir, toy_data_path, run_dir, f"reward.fn={hook}:reward", f"reward.processes={processes}",
        "rollout.num_rollouts=3", "checkpoint.enabled=false",
    ))
    with RLRun(cfg) as run:
        records = run_rollouts(run)
        scorer = run.c.scorer
        workers = [] if scorer._processes is None else list(scorer._processes.workers)
    return [comparable(r) for r in records], workers


def test_a_run_scores_the_same_in_processes_and_stops_its_workers(toy_model_dir, toy_data_path, tmp_path):
    hook = tmp_path / "length_reward.py"
    hook.write_text(HOOK)
    inline, _ = _run(toy_model_dir, toy_data_path, tmp_path / "inline", hook, 0)
    in_processes, workers = _run(toy_model_dir, toy_data_path, tmp_path / "processes", hook, 2)
    assert in_processes == inline
    assert any(r["reward/std"] > 0 and r["train/zero_advantage_skipped"] < 1 for r in inline)  # it trained
    assert len(workers) == 2 and all(w.process.poll() is not None for w in workers)
