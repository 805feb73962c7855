"""``loop.mode: async`` on real Ray: the same prompts as sync mode, every sample exactly one
policy version behind after the first rollout (generation k+1 ran before the push of v_k,
i.e. while the trainer trained on k), staleness logged per sample."""

from __future__ import annotations

import json

from heron.config.root import load_config
from heron.config.data import DataConfig
from heron.data.source import PromptDataSource
from heron.loop import run_rollouts
from heron.rl_run import RLRun
from tests.tolerance import RAY_START


def _config(toy_model_dir, toy_data_path, tmp_path, mode):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        "rollout.num_rollouts=3", "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4",
        "train.micro_batch_size=4", "tracking.progress=false", "checkpoint.enabled=false", "tracking.summary=false",
        "cluster.backend=ray", RAY_START, "cluster.cpus_per_bundle=0.5", "colocate=false", f"loop.mode={mode}",
    ])


def _run(cfg):
    prompts, versions = [], []

    def observe(batch, record):
        prompts.append([g.prompt.prompt_id for g in batch.groups])
        versions.append(sorted({s.policy_version for s in batch.samples}))

    with RLRun(cfg) as run:
        records = run_rollouts(run, observe)
    return prompts, versions, records


def test_async_is_one_step_off_policy(ray_session, toy_model_dir, toy_data_path, tmp_path):
    prompts, versions, records = _run(_config(toy_model_dir, toy_data_path, tmp_path / "async", "async"))
    sync_source = PromptDataSource(DataConfig(path=str(toy_data_path)), seed=0)
    assert prompts == [[p.prompt_id for p in sync_source.get_samples(2)] for _ in range(3)]  # the sync prompt stream
    assert versions == [[0], [0], [1]]  # sync mode would give [0], [1], [2]
    assert [r["staleness/max"] for r in records] == [0, 1, 1]
    rows = [json.loads(line) for line in (tmp_path / "async" / "staleness.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 4 and {r["staleness"] for r in rows if r["rollout_id"] > 0} == {1}
