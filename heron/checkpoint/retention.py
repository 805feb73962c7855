"""``checkpoint.keep_last``: after a checkpoint is committed, delete the oldest ones beyond the
newest N. Runs only after the commit, so at every moment at least the newest committed
checkpoint (and the previous ones until then) exists; deletions are rename-then-remove."""

from __future__ import annotations

from pathlib import Path

from heron.checkpoint.layout import committed, remove, rollout_id_of


def apply_retention(folder: Path, keep_last: int, newest: Path) -> list[Path]:
    """Deletes committed checkpoints older than ``newest`` beyond the newest ``keep_last``
    (``newest`` included in the count); ``keep_last=0`` keeps all. Returns the deleted folders."""
    if keep_last <= 0:
        return []
    newest_id = rollout_id_of(newest)
    older = [p for p in committed(folder) if rollout_id_of(p) < newest_id]
    doomed = older[keep_last - 1 :]
    for path in doomed:
        remove(path)
    return doomed
