"""One writer per folder: an exclusive advisory lock (``flock``) on ``<folder>/heron.lock``.

The kernel holds the lock for the open file and drops it when the holder's process ends, however
it ends (exit, crash, SIGKILL, OOM killer), so a killed run never leaves a stale lock behind and
nothing has to be cleaned up by hand. The file also carries who holds it (pid, host, start time,
command) for the error a second writer gets. It is not deleted at release (deleting a lock file
that another process has just opened lets two processes lock two different files of one name),
except where what it guards is complete by then (``release(remove_file=True)``).

``flock`` locks belong to an open file description, so two ``FolderLock``s of one folder exclude
each other also within one process. Children started with exec do not inherit the descriptor
(Python opens it non-inheritable), so Ray workers and other subprocesses do not hold it. On NFS,
Linux maps ``flock`` to a POSIX byte-range lock held by the NFS server (NFSv4: leases released
when the client goes away).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from heron.errors import UserError
from heron.preflight.writable import check_writable

LOCK_FILE = "heron.lock"


class FolderInUseError(UserError):
    """Another live heron process writes into the folder."""


class FolderLock:
    """Example::

        lock = FolderLock("runs/x", "run.dir").acquire()   # FolderInUseError if held elsewhere
        ...
        lock.release()                                      # or let the process end
    """

    def __init__(self, folder: str | Path, role: str, lock_path: str | Path | None = None):
        self.folder = Path(folder)
        self.role = role  # what the folder is to the user ("run.dir", "checkpoint.dir"): named in errors
        self.path = Path(lock_path) if lock_path is not None else self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        """Creates the lock file's folder if needed and takes the lock, or raises one line naming
        the holder."""
        check_writable(self.path.parent, self.role)  # the pre-flight's one-line answer (a file in the way, ...)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise UserError(f"{self.role} {self.folder} cannot be written: {e.strerror or e}; "
                            f"choose a folder you may write to") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise FolderInUseError(
                f"{self.role} {self.folder} is in use by another heron process ({holder}); "
                f"wait for it to finish, stop it, or choose another {self.role}"
            ) from None
        _write_holder(fd)
        self._fd = fd
        return self

    def release(self, remove_file: bool = False) -> None:
        """Drops the lock (idempotent); the holder record is cleared first. ``remove_file`` deletes
        the lock file too -- only safe once what it guards is complete (``hold_sft_output``: a
        process that still locks the unlinked file then finds the output there and stops)."""
        if self._fd is None:
            return
        try:
            if remove_file:
                self.path.unlink(missing_ok=True)
            else:
                os.ftruncate(self._fd, 0)
        except OSError:
            pass  # a full disk must not keep the lock: closing releases it anyway
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _write_holder(fd: int) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": _command_line(),
    }
    data = (json.dumps(record) + "\n").encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the lock holds without the record; a second writer then gets a vaguer message


def _command_line() -> str:
    """``heron train ...`` or ``python -m heron.cli train ...``: how the holder was started."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"python -m {spec.name}" if spec is not None else Path(sys.argv[0] if sys.argv else "python").name
    return " ".join([program, *sys.argv[1:]])


def _read_holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, 64 << 10, 0) or b"null")
        return (f"pid {record['pid']} on host {record['host']}, started {record['started']}, "
                f"command: {record['command']}")
    except (OSError, ValueError, TypeError, KeyError):
        return "its holder record is not written yet"
