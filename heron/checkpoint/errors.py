"""Errors of the checkpoint layer. Each message is one line that names what is wrong and the
fix, and is raised before any tensor is loaded (the checks compare the metadata heron stores
in ``state.json`` and ``manifest.json``; DCP never sees a checkpoint that does not fit)."""

from __future__ import annotations

from heron.errors import UserError


class CheckpointError(UserError):
    """A checkpoint that is missing, incomplete, corrupt, or does not fit the run."""


class CheckpointMismatchError(CheckpointError):
    """A complete checkpoint that was saved by a different model, optimizer or config."""


class AsyncSaveError(CheckpointError):
    """The background writer of an async save failed; raised in the loop at the next save or at exit."""
