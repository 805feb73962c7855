"""A heron process that owns a real vLLM engine and then waits to be killed: prints the server's
pid (its process group) once the engine is up. For the SIGKILL test in test_vllm_runs.py."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from heron.config.root import load_config  # noqa: E402
from heron.rollout.vllm.build import build_vllm_engine  # noqa: E402
from tests.engines.conftest import vllm_overrides  # noqa: E402

if __name__ == "__main__":
    model_dir, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    data = run_dir / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    engine = build_vllm_engine(load_config(None, vllm_overrides(model_dir, run_dir, f"data.path={data}")))
    print(engine.server.pid, flush=True)
    while True:
        time.sleep(1)
