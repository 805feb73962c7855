"""What a failed checkpoint save says: one line with the OS error and the file it hit, the
checkpoint being written, that the partial save is gone, the last complete checkpoint (what a
rerun resumes from) and what to do. Example::

    could not write checkpoint rollout-000003 in runs/x/checkpoints: No space left on device (ENOSPC)
    writing dcp/__0_1.distcp; the unfinished save was removed; the last complete checkpoint is
    rollout-000001; free space (or raise the limit), then rerun the same command to resume from it
"""

from __future__ import annotations

import errno
from pathlib import Path

from heron.checkpoint.errors import find_cause
from heron.checkpoint.layout import committed
from heron.errors import describe_os_error

OUT_OF_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` is, or was caused by, a full disk or a quota or file-size limit."""
    os_error = find_cause(error, OSError)
    return os_error is not None and os_error.errno in OUT_OF_SPACE


def _what(error: BaseException, temp: Path) -> str:
    os_error = find_cause(error, OSError)
    if os_error is None:
        lines = str(error).strip().splitlines()
        return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")
    where = ""
    if os_error.filename:
        target = Path(str(os_error.filename))
        where = f" writing {target.relative_to(temp) if target.is_relative_to(temp) else target}"
    return describe_os_error(os_error) + where


def save_failure_message(folder: Path, name: str, temp: Path, error: BaseException) -> str:
    what = _what(error, temp)
    newest = next(iter(committed(folder)), None)
    if newest is None:
        last, resume = "no checkpoint of this run is complete yet", " (it starts again from rollout 0)"
    else:
        last, resume = f"the last complete checkpoint is {newest.name}", " to resume from it"
    fix = ("free space (or raise the limit), then rerun the same command"
           if out_of_space(error) else "rerun the same command")
    return f"could not write checkpoint {name} in {folder}: {what}; the unfinished save was removed; {last}; {fix}{resume}"
