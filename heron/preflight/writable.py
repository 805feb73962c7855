"""Output folders are checked by writing to them, before any work.

An unwritable ``checkpoint.dir`` used to surface at the first save, after
``checkpoint.interval`` rollouts of work, as a traceback. Permission bits cannot answer the
question (root ignores them; read-only mounts, immutable folders and a file in the way do
not show in them), so the check does what the run will do: create the folder (and any
missing parents), write a probe file, remove it, and remove every folder it created. A check
that fails, or one from ``heron check``, which runs nothing, leaves nothing behind.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from heron.errors import UserError


def check_writable(path: str | Path, key: str) -> None:
    """Raises a one-line ``UserError`` naming ``key`` unless this process can create ``path``
    (a folder) and write a file into it. Leaves the file system as it found it."""
    target = Path(os.path.abspath(path))  # ".." resolved, so parents are the real parents
    existing = target
    while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{key} '{path}' cannot be a folder: '{existing}' is a file (or a broken link); choose another {key}")
    created: list[Path] = []
    try:
        for folder in reversed([target, *target.parents][: len(target.parts) - len(existing.parts)]):
            folder.mkdir()
            created.append(folder)
        probe = target / f".heron-write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"heron")
        probe.unlink()
    except OSError as e:
        where = f" ('{e.filename}')" if e.filename and str(e.filename) != str(target) else ""
        raise UserError(
            f"{key} '{path}' is not writable: {e.strerror or type(e).__name__}{where}; choose a folder you can write"
        ) from None
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:  # something else wrote into it meanwhile: leave it
                pass
