"""Errors of a rollout engine that runs as a separate server process. Each message is one line
that names the server and its log file, so a failed run says where to look."""


class EngineServerError(RuntimeError):
    """The engine server failed a call (bad answer, deadline passed)."""


class ServerStartError(EngineServerError):
    """The server exited or missed its deadline during start-up."""


class ServerDiedError(EngineServerError):
    """The server exited while heron was using it."""
