"""Reading back what the trackers wrote, through each library's own reader: TensorBoard's
``EventAccumulator``, MLflow's ``MlflowClient``, and for W&B the records of an offline run's
``run-<id>.wandb`` file decoded with wandb's own protobuf (``wandb_internal_pb2.Record``).

wandb ships no Python reader for that file any more (its Go core writes it), so the framing
is read here: the file is a LevelDB-style log (a 7-byte header ``:W&B`` + magic + version, then
32 KiB blocks of chunks, each ``crc32 (4) | length (2) | type (1) | data``, a record split over
FIRST/MIDDLE/LAST chunks). Each chunk's CRC is checked, so a wrong framing fails loudly."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK = 32768
HEADER = b":W&B"
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _chunks(raw: bytes):
    assert raw[:4] == HEADER, f"not a W&B transaction log: {raw[:7]!r}"
    pos, pending = 7, b""
    while pos + 7 <= len(raw):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            break  # zero padding at the end
        data = raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        assert zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc, f"bad CRC at byte {pos}"
        if kind == FULL:
            yield data
        elif kind == FIRST:
            pending = data
        elif kind == MIDDLE:
            pending += data
        elif kind == LAST:
            yield pending + data


def wandb_records(run_file: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    for data in _chunks(Path(run_file).read_bytes()):
        record = pb.Record()
        record.ParseFromString(data)
        records.append(record)
    return records


def wandb_offline_runs(run_dir: Path) -> list[Path]:
    """The ``run-<id>.wandb`` files of every offline run under run_dir/wandb, oldest first."""
    return sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))


def wandb_history(run_file: Path) -> list[dict]:
    rows = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    return rows


def wandb_run_config(run_file: Path) -> dict:
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "run":
            return {item.key: json.loads(item.value_json) for item in record.run.config.update}
    raise AssertionError(f"{run_file} has no run record")


def wandb_artifacts(run_file: Path) -> list[tuple[str, str, list[str]]]:
    """(name, type, file paths) of each artifact logged."""
    return [
        (r.artifact.name, r.artifact.type, [e.path for e in r.artifact.manifest.contents])
        for r in wandb_records(run_file) if r.WhichOneof("record_type") == "artifact"
    ]


def tensorboard_scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows them (purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
