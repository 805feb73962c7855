"""User-facing errors. A ``UserError`` is a mistake in what the user gave heron (config,
data, hooks, checkpoints); the CLI prints its one-line message and exits 2, no traceback.
A ``RunError`` is a failure of the machine the run is on (a full disk, an I/O error): the CLI
prints its one-line message and exits 1."""


class UserError(ValueError):
    """Base of every error whose message alone tells the user what is wrong and how to fix it."""


class ComponentError(RuntimeError):
    """A component failed (an actor died or missed its deadline, a server exited): the message
    names it, the call and what to do. Layers that wrap errors re-raise it unchanged, so the user
    sees the component's own one-line report."""


class RunError(RuntimeError):
    """The run could not go on for a reason outside what the user gave heron (no space left, a
    file it may not write, an I/O error). The message is one line: what was being written, the
    OS error, and what is still safe (e.g. the last complete checkpoint)."""


def describe_os_error(error: OSError) -> str:
    """``No space left on device (ENOSPC)``: the OS's words and the errno name, one line."""
    import errno

    name = errno.errorcode.get(error.errno or 0)
    text = error.strerror or str(error)
    return f"{text} ({name})" if name else text
