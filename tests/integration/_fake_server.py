"""A stand-in for an inference server, for the ServerProcess tests (real processes, no vLLM).

Like vLLM it spawns a child (vLLM's engine core) in its own process group, then answers
GET /health with 200 on 127.0.0.1:<port>. Options: --delay before serving, --exit-code to die
during start-up, --watchdog to start heron's launcher guardian (the real function).
"""

import argparse
import http.server
import os
import subprocess
import sys
import time
from pathlib import Path

SERVER_SIDE = Path(__file__).resolve().parents[2] / "heron" / "rollout" / "vllm" / "server_side"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--watchdog", action="store_true")
    args = parser.parse_args()
    if args.watchdog:
        sys.path.insert(0, str(SERVER_SIDE))
        from heron_vllm_launcher import start_guardian

        start_guardian(grace_s=2.0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    print(f"fake server pid {os.getpid()} child {child.pid}", flush=True)
    if args.exit_code:
        print("fatal: the fake server failed on purpose", flush=True)
        sys.exit(args.exit_code)
    time.sleep(args.delay)
    http.server.HTTPServer(("127.0.0.1", args.port), Health).serve_forever()


if __name__ == "__main__":
    main()
