"""User-facing errors. A ``UserError`` is a mistake in what the user gave heron (config,
data, hooks, checkpoints); the CLI prints its one-line message and exits 2, no traceback."""


class UserError(ValueError):
    """Base of every error whose message alone tells the user what is wrong and how to fix it."""


class ComponentError(RuntimeError):
    """A component failed (an actor died or missed its deadline, a server exited): the message
    names it, the call and what to do. Layers that wrap errors re-raise it unchanged, so the user
    sees the component's own one-line report."""
