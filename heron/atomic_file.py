"""Files and folders that appear whole or not at all.

Every artefact heron presents under its final name (plots, config.yaml, rewritten logs, HF
exports, the checkpoint pointer) is written to a temporary sibling, fsync'd, and renamed over
the final name; the parent folder is then fsync'd so the rename itself is durable. A failure
part-way (a full disk, a crash) leaves the old file, or nothing, under the final name -- never a
0-byte or truncated one -- and the temporary file is removed when the failure is an exception.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (a folder's fsync makes its entries -- renames, new files -- durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (and ``root`` itself)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def write_file_durably(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` in place and fsyncs it (for files inside a folder that is itself
    committed by a rename, such as a checkpoint's temporary folder)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def temp_sibling(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}-{time.time_ns()}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path to write ``path``'s new content to; on success it is fsync'd and
    renamed over ``path``; on an exception it is removed and ``path`` is left as it was."""
    path = Path(path)
    temp = temp_sibling(path)
    try:
        yield temp
        fsync_path(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_atomically(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as temp:
        temp.write_bytes(data)


def publish_folder(temp: Path, final: Path) -> Path:
    """Renames a finished folder to its final name (after an fsync of every file in it). Refuses
    to replace anything at ``final``: rename(2) would replace an empty folder, so that is checked."""
    fsync_tree(temp)
    if final.exists() or final.is_symlink():
        raise FileExistsError(17, "File exists", str(final))
    os.rename(temp, final)
    fsync_path(final.parent)
    return final
