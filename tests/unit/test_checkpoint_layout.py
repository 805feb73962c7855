"""Checkpoint files on disk, with a small plain torch model (no transformers): atomic commit,
manifest verification, keep_last, leftovers of crashed saves, fingerprints and their one-line
errors, RNG round trip, and the ``checkpoint.async`` config key."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest
import torch

from heron.checkpoint import dcp_io
from heron.checkpoint.errors import CheckpointError, CheckpointMismatchError
from heron.checkpoint.fingerprint import check_config, check_model, check_optimizer, optimizer_fingerprint
from heron.checkpoint.layout import committed, read_latest
from heron.checkpoint.reader import find_latest, open_checkpoint
from heron.checkpoint.rng import capture_rng, restore_rng
from heron.checkpoint.writer import CheckpointWriter
from heron.config.root import load_config


def _model_and_optimizer(seed: int = 0, width: int = 16):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, width)).square().sum().backward()
    optimizer.step()
    return model, optimizer


def _save_all(folder, ids, **kw) -> CheckpointWriter:
    model, optimizer = _model_and_optimizer()
    writer = CheckpointWriter(folder, **kw)
    for rollout_id in ids:
        writer.save(rollout_id, model, optimizer, {"note": rollout_id})
    writer.close()
    return writer


def test_commit_writes_verified_folder_and_latest(tmp_path):
    _save_all(tmp_path, [0, 1], async_save=False)
    assert [p.name for p in committed(tmp_path)] == ["rollout-000001", "rollout-000000"]
    assert read_latest(tmp_path) == "rollout-000001"
    ckpt = open_checkpoint(tmp_path / "rollout-000001")
    assert ckpt.rollout_id == 1 and ckpt.state["note"] == 1
    manifest = json.loads((tmp_path / "rollout-000001" / "manifest.json").read_text())
    assert {"state.json", "dcp/.metadata"} <= set(manifest["files"])
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_keep_last_deletes_only_older_after_commit(tmp_path):
    _save_all(tmp_path, [0, 1, 2, 3], async_save=True, keep_last=2)
    assert [p.name for p in committed(tmp_path)] == ["rollout-000003", "rollout-000002"]


@pytest.mark.parametrize("damage, reason", [
    ("flip", "checksum mismatch in dcp/__0_0.distcp"),
    ("truncate", "dcp/__0_0.distcp has"),
    ("delete", "missing file dcp/__0_0.distcp"),
    ("no_manifest", "incomplete: no manifest.json"),
])
def test_damaged_newest_is_skipped_with_a_warning_naming_it(tmp_path, caplog, damage, reason):
    _save_all(tmp_path, [0, 1], async_save=False)
    newest = tmp_path / "rollout-000001"
    shard = newest / "dcp" / "__0_0.distcp"
    if damage == "flip":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-10])
    elif damage == "delete":
        shard.unlink()
    else:
        (newest / "manifest.json").unlink()
    with caplog.at_level(logging.WARNING, logger="heron.checkpoint"):
        assert find_latest(tmp_path).rollout_id == 0
    assert any("rollout-000001" in r.message and reason in r.message for r in caplog.records)
    with pytest.raises(CheckpointError, match=reason) as info:
        open_checkpoint(newest)
    assert "\n" not in str(info.value)


def test_unfinished_save_is_ignored_then_removed_by_next_writer(tmp_path, caplog):
    _save_all(tmp_path, [0], async_save=False)
    stale = tmp_path / "rollout-000001.tmp-99999-1"
    (stale / "dcp").mkdir(parents=True)
    (stale / "state.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="heron.checkpoint"):
        assert find_latest(tmp_path).rollout_id == 0
    assert any(stale.name in r.getMessage() for r in caplog.records)
    CheckpointWriter(tmp_path, async_save=False)
    assert not stale.exists()


def test_async_save_stages_a_copy_before_returning(tmp_path):
    model, optimizer = _model_and_optimizer()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(5, model, optimizer, {})
    assert writer.wait_until_staged(timeout=0) and not writer.staging
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # training continues while the files are written
    writer.close()
    fresh, fresh_opt = _model_and_optimizer(seed=1)
    dcp_io.load_into(fresh, fresh_opt, tmp_path / "rollout-000005")
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_load_restores_model_and_optimizer_bit_exactly(tmp_path):
    model, optimizer = _model_and_optimizer(seed=0)
    CheckpointWriter(tmp_path, async_save=False).save(0, model, optimizer, {})
    fresh, fresh_opt = _model_and_optimizer(seed=3)
    dcp_io.load_into(fresh, fresh_opt, tmp_path / "rollout-000000")
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    saved, loaded = optimizer.state_dict(), fresh_opt.state_dict()
    for index, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(value, loaded["state"][index][key]), (index, key)


def test_background_failure_surfaces_in_the_loop(tmp_path, monkeypatch):
    def broken_save(*args, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dcp_io, "save", broken_save)
    model, optimizer = _model_and_optimizer()
    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(0, model, optimizer, {})
    with pytest.raises(CheckpointError, match="async checkpoint save of rollout-000000 failed: OSError"):
        writer.close()
    assert committed(tmp_path) == []


def test_fingerprint_mismatches_are_one_line():
    model, optimizer = _model_and_optimizer(width=16)
    other, other_opt = _model_and_optimizer(width=8)
    live, other_live = dcp_io.live_state(model, optimizer), dcp_io.live_state(other, other_opt)
    from heron.checkpoint.fingerprint import model_fingerprint

    with pytest.raises(CheckpointMismatchError, match=r"0.weight is \(16, 16\) float32 in the checkpoint, \(8, 8\)") as e:
        check_model("rollout-000001", model_fingerprint(live["model"]), model_fingerprint(other_live["model"]))
    assert "\n" not in str(e.value) and "(and 2 more)" in str(e.value)
    split = torch.optim.AdamW([{"params": list(model.parameters())[:2]}, {"params": list(model.parameters())[2:]}])
    saved = optimizer_fingerprint(optimizer, live["optimizer"])
    current = optimizer_fingerprint(split, dcp_io.live_state(model, split)["optimizer"])
    with pytest.raises(CheckpointMismatchError, match=r"param groups of \[4\] parameters in the checkpoint, \[2, 2\] in the run"):
        check_optimizer("rollout-000001", saved, current)
    with pytest.raises(CheckpointMismatchError, match="train.lr=0.1 in the checkpoint, 0.2 in this run"):
        check_config("rollout-000001", {"train.lr": 0.1}, {"train.lr": 0.2})


def test_rng_state_round_trips_through_json():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = json.loads(json.dumps(capture_rng()))
    expected = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng(state)
    assert random.random() == expected[0] and np.random.rand() == expected[1]
    assert torch.equal(torch.rand(3), expected[2])


def test_async_is_the_yaml_key_of_async_():
    cfg = load_config(None, ["model.path=m", "data.path=d", "checkpoint.async=false"])
    assert cfg.checkpoint.async_ is False and cfg.checkpoint.folder("runs/x") == "runs/x/checkpoints"
    from heron.config.base import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'checkpoint.async'"):
        load_config(None, ["model.path=m", "data.path=d", "checkpoint.asynk=false"])
