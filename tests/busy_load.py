"""Runs a command while every core is kept busy, as on a machine shared with other work:
``python tests/busy_load.py [--procs N] -- COMMAND...``; exits with the command's status.

The busy processes spin until the command ends, and are killed then, also when it fails or
this script is interrupted (SIGINT, SIGTERM). Should this script itself be SIGKILLed, each
spinner notices that its parent changed and stops by itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    pass\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 2, help="busy processes (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) for _ in range(args.procs)]
    print(f"busy_load: {len(spinners)} busy processes running under: {' '.join(command)}", flush=True)
    try:
        return subprocess.call(command)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
        print(f"busy_load: {len(spinners)} busy processes stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
