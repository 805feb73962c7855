"""``loop.mode: async`` on real Ray: the same prompts as sync mode, every sample exactly one
policy version behind after the first rollout (generation k+1 ran before the push of v_k,
i.e. while the trainer trained on k), staleness logged per sample; a run resumed from a
checkpoint trains the rollout that was generated ahead, bit for bit."""

from __future__ import annotations

import json

from heron.config.root import load_config
from heron.config.data import DataConfig
from heron.data.source import PromptDataSource
from heron.loop import run_rollouts
from heron.rl_run import RLRun
from tests.tolerance import RAY_START


def _config(toy_model_dir, toy_data_path, tmp_path, mode, *extra):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        "rollout.num_rollouts=3", "rollout.batch_size=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4",
        "train.micro_batch_size=4", "tracking.progress=false", "checkpoint.enabled=false", "tracking.summary=false",
        "cluster.backend=ray", RAY_START, "cluster.cpus_per_bundle=0.5", "colocate=false", f"loop.mode={mode}", *extra,
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


def test_an_async_run_resumes_with_the_rollout_it_generated_ahead(ray_session, toy_model_dir, toy_data_path, tmp_path):
    """The checkpoint after rollout k holds rollout k+1 as generated from v_k; the resumed run
    trains those samples (one version stale, as the uninterrupted run did) instead of sampling
    rollout k+1 again from the restored v_{k+1}: every later record, and the staleness log, are
    bit-identical (the same operations in the same order: tests/tolerance.py, rule 1)."""
    import shutil
    from pathlib import Path

    from heron.checkpoint.catalog import inspect_lines
    from heron.checkpoint.layout import IN_FLIGHT_FILE
    from tests.run_compare import comparable

    saves = ("checkpoint.enabled=true", "checkpoint.interval=1", "checkpoint.async=false")
    _, _, straight = _run(_config(toy_model_dir, toy_data_path, tmp_path / "straight", "async", *saves))
    checkpoints = tmp_path / "straight" / "checkpoints"
    assert [(checkpoints / f"rollout-00000{k}" / IN_FLIGHT_FILE).is_file() for k in range(3)] == [True, True, False]
    first = Path("checkpoints") / "rollout-000000"
    assert ("in-flight rollout: 1 (4 samples generated ahead by policy version 0; a resumed async run trains them)"
            in inspect_lines(tmp_path / "straight" / first))
    shutil.copytree(tmp_path / "straight" / first, tmp_path / "resumed" / first)
    # the whole log, as a run killed after rollout 2 left it: the resume drops the rows after rollout 0
    shutil.copy(tmp_path / "straight" / "staleness.jsonl", tmp_path / "resumed" / "staleness.jsonl")
    _, versions, resumed = _run(_config(toy_model_dir, toy_data_path, tmp_path / "resumed", "async", *saves))
    assert versions == [[0], [1]]  # rollout 1 as generated ahead from v0, not sampled again from v1
    assert [comparable(r) for r in resumed] == [comparable(r) for r in straight[1:]]
    assert (tmp_path / "resumed" / "staleness.jsonl").read_text() == (tmp_path / "straight" / "staleness.jsonl").read_text()
