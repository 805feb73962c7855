"""What ``heron ckpt list`` and ``heron ckpt inspect`` print: every checkpoint with its status,
verified the same way resume verifies it."""

from __future__ import annotations

from pathlib import Path

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.layout import committed, leftovers, read_latest
from heron.checkpoint.reader import open_checkpoint
from heron.checkpoint.resume import read_in_flight


def _mb(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB"


def checkpoints_of(folder: str | Path) -> Path:
    """The checkpoint folder ``folder`` names: itself, or the ``checkpoints/`` of a run folder
    (one with a config.yaml or a checkpoints/ folder and no checkpoints of its own)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    if committed(folder) or leftovers(folder) or read_latest(folder):
        return folder
    if (folder / "checkpoints").is_dir():
        return folder / "checkpoints"
    return folder


def list_lines(folder: str | Path) -> list[str]:
    """One line per checkpoint (newest first): name, rollout, size, ok or why not; then leftovers.
    ``folder`` is a checkpoint folder or a run folder (its ``checkpoints/``)."""
    folder = checkpoints_of(folder)
    latest = read_latest(folder)
    lines = []
    for path in committed(folder):
        marker = " (latest)" if path.name == latest else ""
        try:
            ckpt = open_checkpoint(path)
            lines.append(f"{path.name}  rollout {ckpt.rollout_id}  {_mb(ckpt.num_bytes)}  ok{marker}")
        except CheckpointError as e:
            lines.append(f"{path.name}  INVALID: {e}{marker}")
    lines += [f"{p.name}  unfinished save (ignored; removed by the next run)" for p in leftovers(folder)]
    return lines or [f"no checkpoints in {folder}"]


def inspect_lines(path: str | Path) -> list[str]:
    """Validity, rollout id, sizes, policy version, data position and the resume-critical config;
    a ``CheckpointError`` (one line) if the checkpoint does not verify."""
    path = Path(path)
    ckpt = open_checkpoint(path)
    state = ckpt.state
    fingerprint = state.get("fingerprint", {})
    params = sum(_numel(v["shape"]) for v in fingerprint.get("model", {}).values())
    lines = [
        f"{path}: ok (all files match manifest sizes and checksums; DCP metadata is plain)",
        f"rollout_id: {ckpt.rollout_id}   next rollout: {ckpt.rollout_id + 1}",
        f"policy_version: {state.get('policy_version')}",
        f"size: {_mb(ckpt.num_bytes)}   model tensors: {len(fingerprint.get('model', {}))} ({params:,} values)",
        f"optimizer: {fingerprint.get('optimizer', {}).get('type')} with "
        f"{[len(g) for g in fingerprint.get('optimizer', {}).get('param_groups', [])]} parameters per group",
        f"data sampler: {state.get('sampler')}   run seed: {state.get('run_seed')}",
        f"config digest: {state.get('config_digest')} over {', '.join(state.get('config_digest_covers', []))}",
    ]
    in_flight = read_in_flight(ckpt)
    if in_flight is not None:
        versions = sorted({s.policy_version for s in in_flight.samples})
        lines.append(f"in-flight rollout: {in_flight.rollout_id} ({in_flight.num_samples} samples generated ahead by "
                     f"policy version {', '.join(map(str, versions))}; a resumed async run trains them)")
    lines += [f"  {k} = {v!r}" for k, v in fingerprint.get("config", {}).items()]
    return lines


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
