"""Errors of the checkpoint layer. Each message is one line that names what is wrong and the
fix, and is raised before any tensor is loaded (the checks compare the metadata heron stores
in ``state.json`` and ``manifest.json``; DCP never sees a checkpoint that does not fit)."""

from __future__ import annotations

from heron.errors import RunError, UserError


class CheckpointError(UserError):
    """A checkpoint that is missing, incomplete, corrupt, unsafe, or does not fit the run."""


class CheckpointMismatchError(CheckpointError):
    """A complete checkpoint that was saved by a different model, optimizer or config."""


class CheckpointSaveError(RunError):
    """A save failed (typically the disk: ENOSPC, EDQUOT, EFBIG, EIO). The message names the OS
    error, the checkpoint being written and the last complete one; the partial save is removed."""


class AsyncSaveError(CheckpointSaveError):
    """The background writer of an async save failed; raised in the loop at the next save or at exit."""


def find_cause(error: BaseException, kind: type) -> BaseException | None:
    """The first exception of type ``kind`` in ``error`` and what it wraps, breadth first:
    ``__cause__``, ``__context__``, a ``cause`` attribute (Ray) and DCP's ``CheckpointException.failures``
    (a BaseException that holds each rank's exception with its traceback, and prints them all)."""
    queue, seen = [error], set()
    while queue:
        e = queue.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return e
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            queue += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
        queue += [c for c in (e.__cause__, e.__context__, getattr(e, "cause", None)) if isinstance(c, BaseException)]
    return None
