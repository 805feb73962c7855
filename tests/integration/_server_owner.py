"""A heron-like process that owns a fake server through ServerProcess, for the exit-path tests:
prints the server's pid, then waits to be signalled (SIGTERM, SIGINT or SIGKILL)."""

import sys
import time
from pathlib import Path

from heron.interrupt import install_interrupt_handlers
from heron.rollout.server.process import ServerProcess, free_port

FAKE = Path(__file__).with_name("_fake_server.py")

if __name__ == "__main__":
    log_path, watchdog = Path(sys.argv[1]), sys.argv[2] == "watchdog"
    port = free_port()
    command = [sys.executable, str(FAKE), "--port", str(port)] + (["--watchdog"] if watchdog else [])
    server = ServerProcess("fake server", command, {}, log_path, f"http://127.0.0.1:{port}/health")
    server.start(timeout_s=120)
    install_interrupt_handlers()
    print(server.pid, flush=True)
    while True:
        time.sleep(1)
