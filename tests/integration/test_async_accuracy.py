"""Slow: async mode trains the demo task (SFT warm start, then RL) to the same held-out
accuracy band as sync mode, on real Ray with disaggregated engines."""

from __future__ import annotations

import pytest

from heron.config.root import load_config
from heron.loop import train
from heron.sft import run_sft
from heron.toy.demo_assets import create_demo_assets

DEMO = "configs/demo.yaml"
BAND = 0.10  # |accuracy(async) - accuracy(sync)| on 100 held-out prompts


@pytest.mark.slow
def test_async_reaches_sync_accuracy(ray_session, tmp_path):
    assets = create_demo_assets(tmp_path)
    base = [f"data.path={assets['train']}", f"eval.path={assets['test']}", "eval.max_prompts=100",
            "tracking.progress=false", "tracking.summary=false"]
    sft_model = run_sft(load_config(DEMO, [*base, f"run.dir={tmp_path}/sft", f"model.path={assets['model']}"]))
    final = {}
    for mode in ("sync", "async"):
        records = train(load_config(DEMO, [
            *base, f"run.dir={tmp_path}/{mode}", f"model.path={sft_model}", "cluster.backend=ray",
            "cluster.cpus_per_bundle=1", "colocate=false", f"loop.mode={mode}",
        ]))
        final[mode] = records[-1]["eval/accuracy"]
    print(f"final eval/accuracy: {final}")
    assert abs(final["async"] - final["sync"]) <= BAND, final
