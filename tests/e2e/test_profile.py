"""tracking.profile: the rollouts it names write a Chrome trace with every stage's range and the
operators inside them, and an operator table; the other rollouts write nothing, and profiling
changes no metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from heron.loop import train
from heron.tracking.profiler import rollout_folder
from tests.run_compare import comparable

STAGES = ["heron.generate", "heron.reward", "heron.train", "heron.push_weights", "heron.checkpoint"]


def _span(event: dict) -> tuple[float, float]:
    return event["ts"], event["ts"] + event["dur"]


def test_a_profiled_rollout_writes_its_trace_and_operator_table(run_config, tmp_path, capsys):
    profiled = run_config("rollout.num_rollouts=3", "tracking.profile.rollouts=[1]", f"run.dir={tmp_path / 'profiled'}")
    plain = run_config("rollout.num_rollouts=3", f"run.dir={tmp_path / 'plain'}")

    records = train(profiled)

    assert [p.name for p in (tmp_path / "profiled" / "profile").iterdir()] == ["rollout_00001"]
    folder = rollout_folder(tmp_path / "profiled", 1)
    assert f"profile of rollout 1: {folder} (trace.json" in capsys.readouterr().out  # the console names it
    events = [e for e in json.loads((folder / "trace.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    stages = {e["name"]: _span(e) for e in events if e["name"].startswith("heron.")}
    assert set(STAGES) <= set(stages), sorted(stages)
    assert [stages[s][0] for s in STAGES] == sorted(stages[s][0] for s in STAGES)  # in the loop's order
    start, end = stages["heron.train"]
    train_ops = [e for e in events if e["name"].startswith("aten::") and start <= e["ts"] <= end]
    assert any(e["name"] in ("aten::mm", "aten::addmm", "aten::linear") for e in train_ops)
    table = (folder / "ops.txt").read_text()
    assert table.startswith("operators by self_cpu_time_total") and "aten::" in table
    assert not (tmp_path / "plain" / "profile").exists()
    assert [comparable(r) for r in records] == [comparable(r) for r in train(plain)]


FAILS_IN_ROLLOUT_1 = '''
def postprocess(config, rollout_id, rollout_data):
    if rollout_id == 1:
        raise RuntimeError("the postprocess hook broke in rollout 1")
'''


def test_a_rollout_that_fails_under_the_profiler_writes_no_profile_and_raises_its_own_error(run_config, tmp_path):
    hooks = tmp_path / "hooks.py"
    hooks.write_text(FAILS_IN_ROLLOUT_1)
    cfg = run_config("rollout.num_rollouts=3", "tracking.profile.rollouts=[0, 1]",
                     f"hooks.rollout_data_postprocess={hooks}:postprocess")

    with pytest.raises(RuntimeError, match="the postprocess hook broke in rollout 1"):
        train(cfg)

    assert [p.name for p in (Path(cfg.run.dir) / "profile").iterdir()] == ["rollout_00000"]
    assert not torch._C._autograd._profiler_enabled()  # the failed window's profiler was stopped


def test_record_shapes_and_memory_reach_the_trace_and_the_table():
    from heron.config.tracking import ProfileConfig
    from heron.tracking.profiler import Capture

    capture = Capture(ProfileConfig(rollouts=[0], record_shapes=True, profile_memory=True))
    torch.ones(64, 32) @ torch.ones(32, 16)
    trace, table = capture.finish()

    mm = [e for e in json.loads(trace)["traceEvents"] if e.get("name") == "aten::mm"]
    assert mm and mm[0]["args"]["Input Dims"] == [[64, 32], [32, 16]]
    assert "Input Shapes" in table and "[[64, 32], [32, 16]]" in table
    assert any(e.get("name") == "[memory]" for e in json.loads(trace)["traceEvents"])  # allocations recorded
