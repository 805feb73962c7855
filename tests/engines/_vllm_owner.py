"""A heron process that owns a real vLLM engine and then waits to be killed: prints the server's
pid (its process group) once the engine is up. For the SIGKILL test in test_vllm_runs.py."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engines.conftest import start_vllm_engine  # noqa: E402

if __name__ == "__main__":
    engine = start_vllm_engine(Path(sys.argv[1]), Path(sys.argv[2]))
    print(engine.server.pid, flush=True)
    while True:
        time.sleep(1)
