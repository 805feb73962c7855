"""Process-wide signal handling shared by everything that owns child processes (Ray actors,
engine servers): SIGTERM must unwind like Ctrl-C so ``atexit`` and ``close`` stop them."""

from __future__ import annotations

import signal
import sys
import threading


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C (SystemExit), so ``close`` runs and nothing is orphaned.
    Only from the main thread, and only if nobody installed a handler already."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
