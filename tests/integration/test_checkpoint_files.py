"""Checkpoint files on disk, with a small plain torch model (no transformers): atomic commit,
manifest verification, keep_last, leftovers of crashed saves, async staging and error surfacing,
bit-exact load."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import zlib
from pathlib import Path

import pytest
import torch
import xxhash

from heron.checkpoint import dcp_io
from heron.checkpoint.errors import AsyncSaveError, CheckpointError
from heron.checkpoint.layout import committed, read_latest
from heron.checkpoint.reader import find_latest, open_checkpoint
from heron.checkpoint.shards import ModuleShards, ShardRequest
from heron.checkpoint.writer import CheckpointWriter
from tests.checkpoint_helpers import held_staging, model_and_optimizer




def _save_all(folder, ids, **kw) -> CheckpointWriter:
    shards = ModuleShards(*model_and_optimizer())
    writer = CheckpointWriter(folder, **kw)
    for rollout_id in ids:
        writer.save(rollout_id, shards, {"note": rollout_id})
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


def test_manifest_checksums_are_those_of_the_written_bytes(tmp_path):
    """The checksums computed while DCP wrote (no second read) equal a fresh XXH3-128 of each
    file, so ``verify`` checks the bytes on disk and not what a writer thought it wrote."""
    _save_all(tmp_path, [0], async_save=False)
    folder = tmp_path / "rollout-000000"
    files = json.loads((folder / "manifest.json").read_text())["files"]
    assert json.loads((folder / "manifest.json").read_text())["format"] == 3
    assert any(rel.startswith("dcp/") and rel.endswith(".distcp") for rel in files)
    for rel, entry in files.items():
        assert entry == {"size": (folder / rel).stat().st_size, "xxh3_128": xxhash.xxh3_128((folder / rel).read_bytes()).hexdigest()}


@pytest.mark.parametrize("async_save", [False, True])
def test_a_relative_checkpoint_folder_hashes_no_shard_twice(tmp_path, monkeypatch, async_save):
    """The manifest takes the shards' checksums from the write (DCP reports absolute paths);
    only files written outside DCP are read again. A relative ``checkpoint.dir`` (the default
    ``runs/...``) once missed every one of them, and each save read and hashed its shards twice."""
    from heron.checkpoint import manifest

    hashed = []
    read = manifest.checksum_of
    monkeypatch.setattr(manifest, "checksum_of", lambda path: hashed.append(path) or read(path))
    monkeypatch.chdir(tmp_path)
    _save_all(Path("runs") / "checkpoints", [0], async_save=async_save)
    assert [p for p in hashed if p.suffix == ".distcp"] == []
    assert any(p.name == "state.json" for p in hashed)  # the files written outside DCP are read
    assert open_checkpoint(tmp_path / "runs" / "checkpoints" / "rollout-000000").rollout_id == 0


@pytest.mark.parametrize("version, key, checksum", [
    (1, "crc32", lambda data: f"{zlib.crc32(data):08x}"),
    (2, "sha256", lambda data: hashlib.sha256(data).hexdigest()),
])
def test_older_manifest_formats_still_verify_with_their_checksum(tmp_path, version, key, checksum):
    """A checkpoint saved by an earlier heron (format 1: crc32, format 2: sha256) verifies and
    opens; a flipped bit in it is still caught by that format's checksum."""
    _save_all(tmp_path, [0], async_save=False)
    folder = tmp_path / "rollout-000000"
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format"] = version
    manifest["files"] = {rel: {"size": e["size"], key: checksum((folder / rel).read_bytes())} for rel, e in manifest["files"].items()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert open_checkpoint(folder).rollout_id == 0
    shard = folder / "dcp" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch in dcp/__0_0.distcp"):
        open_checkpoint(folder)


def test_a_manifest_format_this_heron_does_not_know_is_refused_in_one_line(tmp_path):
    _save_all(tmp_path, [0], async_save=False)
    folder = tmp_path / "rollout-000000"
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format"] = 99
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"has manifest format 99; this heron reads \(1, 2, 3\)") as info:
        open_checkpoint(folder)
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


def _optimizer_tensors(optimizer) -> dict:
    return {(i, k): v.clone() for i, state in optimizer.state_dict()["state"].items() for k, v in state.items()}


def test_async_save_returns_before_the_copy_and_the_next_step_waits_for_it(tmp_path, monkeypatch):
    """The loop is not blocked by the host copy: ``save`` returns while it is pending. The next
    optimizer step waits for the copy (a step pre-hook), so the checkpoint holds the weights and
    AdamW state of the save, bit for bit, and the step then applies as usual."""
    started, release = held_staging(monkeypatch)
    model, optimizer = model_and_optimizer()
    expected_model = {k: v.clone() for k, v in model.state_dict().items()}
    expected_optimizer = _optimizer_tensors(optimizer)
    shards = ModuleShards(model, optimizer)
    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(5, shards, {})
    assert started.wait(timeout=60) and shards.staging  # save returned; the copy has not run yet

    def train_step():
        model(torch.randn(4, 16)).square().sum().backward()
        optimizer.step()  # training goes on while the save is in flight

    stepper = threading.Thread(target=train_step)
    stepper.start()
    stepper.join(timeout=0.5)
    assert stepper.is_alive(), "optimizer.step ran while the async save had not copied the tensors yet"
    release.set()
    stepper.join(timeout=60)
    assert not stepper.is_alive() and not shards.staging
    writer.close()
    assert not torch.equal(model.state_dict()["0.weight"], expected_model["0.weight"])  # the step applied
    fresh, fresh_opt = model_and_optimizer(seed=1)
    dcp_io.load_into(fresh, fresh_opt, tmp_path / "rollout-000005")
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, expected_model[name]), name
    loaded = _optimizer_tensors(fresh_opt)
    assert loaded.keys() == expected_optimizer.keys()
    for key, tensor in loaded.items():
        assert torch.equal(tensor, expected_optimizer[key]), key


def test_a_failed_async_copy_frees_the_trainer_and_fails_the_save(tmp_path, monkeypatch):
    """A copy that raises still releases the live tensors (the next step does not hang, the
    ``on_staged`` callback runs once) and the save fails in the loop, with nothing committed."""
    def broken_stage(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(dcp_io, "stage", broken_stage)
    model, optimizer = model_and_optimizer()
    shards, calls = ModuleShards(model, optimizer), []
    shards.save_state(ShardRequest(str(tmp_path), async_save=True), on_staged=lambda: calls.append(1))
    shards.wait_staged()
    optimizer.step()
    assert calls == [1] and not shards.staging
    with pytest.raises(OSError, match="Cannot allocate memory"):
        shards.wait_saved()


def test_a_save_thread_that_cannot_start_leaves_nothing_waiting(tmp_path, monkeypatch):
    """When the save's thread does not start (the OS refused a thread), ``save_state`` raises,
    ``on_staged`` runs once and the optimizer's step does not wait for a copy that never comes."""
    from heron.checkpoint import shards as shards_module

    def no_thread(*args, **kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(shards_module, "start_write", no_thread)
    model, optimizer = model_and_optimizer()
    shards, calls = ModuleShards(model, optimizer), []
    with pytest.raises(RuntimeError, match="can't start new thread"):
        shards.save_state(ShardRequest(str(tmp_path), async_save=True), on_staged=lambda: calls.append(1))
    assert calls == [1] and not shards.staging
    optimizer.step()  # the step pre-hook returns at once


def test_load_waits_for_a_pending_copy(tmp_path, monkeypatch):
    """A trainer load writes into the live tensors; ``wait_staged`` (what the trainers' load_state
    call first) returns only once the async save's copy is done."""
    model, optimizer = model_and_optimizer()
    CheckpointWriter(tmp_path / "a", async_save=False).save(0, ModuleShards(model, optimizer), {})
    started, release = held_staging(monkeypatch)
    shards = ModuleShards(model, optimizer)
    writer = CheckpointWriter(tmp_path / "b", async_save=True)
    writer.save(1, shards, {})
    assert started.wait(timeout=60)
    waiter = threading.Thread(target=shards.wait_staged)
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive()
    release.set()
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    writer.close()


def test_load_restores_model_and_optimizer_bit_exactly(tmp_path):
    model, optimizer = model_and_optimizer(seed=0)
    CheckpointWriter(tmp_path, async_save=False).save(0, ModuleShards(model, optimizer), {})
    fresh, fresh_opt = model_and_optimizer(seed=3)
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
    model, optimizer = model_and_optimizer()
    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(0, ModuleShards(model, optimizer), {})
    with pytest.raises(AsyncSaveError, match=r"could not write checkpoint rollout-000000 .*No space left on device"):
        writer.close()
    assert committed(tmp_path) == [] and list(tmp_path.iterdir()) == []  # the unfinished save is removed
