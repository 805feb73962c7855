"""Append-only JSONL records (metrics.jsonl, eval.jsonl): one object per line.

Writing: each record is one ``write`` of the whole line to an append-mode file, then fsync, so
a finished rollout's record is on disk before its checkpoint, and a crash tears at most the
line being written. A write that fails part-way (a full disk, a file size limit) is cut back to
the previous line before the error is raised, so a failing run leaves whole lines only.

Reading: a last line that does not parse is what a crash mid-write (or a power loss, which can
leave NUL bytes) leaves behind: it is dropped with a warning naming file:line. A line in the
middle that does not parse is corruption, not a crash: a one-line ``RunFileError`` naming
file:line, and nothing is rewritten.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heron.errors import RunError, UserError, describe_os_error

log = logging.getLogger("heron.tracking")


class RunFileError(UserError):
    """A run file (metrics.jsonl, eval.jsonl) is corrupt somewhere other than its last line."""


class JsonlWriter:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)  # unbuffered: each write() is one write(2)

    def write(self, record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record, sort_keys=True) + "\n").encode())
        start = os.lseek(self._file.fileno(), 0, os.SEEK_END)
        try:
            while data:  # a regular file takes it all, or part and then an error
                data = data[self._file.write(data):]
            os.fsync(self._file.fileno())
        except OSError as e:
            _cut_back(self._file.fileno(), start)
            raise RunError(f"could not append a record to {self.path}: {describe_os_error(e)}") from e

    def close(self) -> None:
        self._file.close()


def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # then the torn last line is dropped when the file is read


@dataclass(frozen=True)
class JsonlLine:
    number: int  # 1-based line number in the file
    text: str  # the line with its newline
    record: dict[str, Any]


def parse_jsonl(text: str, path: Path) -> list[JsonlLine]:
    """The records of a JSONL file's ``text`` (blank lines skipped); see the module doc for torn
    last lines and corrupt middle lines."""
    pieces = text.split("\n")
    lines = [(i + 1, piece) for i, piece in enumerate(pieces) if piece.strip("\x00 \t\r")]
    parsed = []
    for index, (number, piece) in enumerate(lines):
        try:
            record = json.loads(piece)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except ValueError as e:
            if index == len(lines) - 1:
                log.warning("%s:%d: dropped a torn last line (a write cut short by a crash or a full disk)",
                            path, number)
                break
            raise RunFileError(
                f"{path}:{number}: not a JSON record ({e}); a line in the middle is corrupt, not torn by a "
                f"crash: fix or remove that line, or choose a new run.dir"
            ) from None
        parsed.append(JsonlLine(number, piece + "\n", record))
    return parsed


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    path = Path(path)
    return [line.record for line in parse_jsonl(path.read_text(encoding="utf-8", errors="replace"), path)]
