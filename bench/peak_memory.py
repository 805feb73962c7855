"""Peak resident memory of one step, for the memory benches (logprob_memory, activation_checkpointing).

Each measurement runs in a fresh process with glibc returning every allocation over 64 KiB to the
OS (``MALLOC_MMAP_THRESHOLD_``), so the resident set follows the live tensors; after a warm-up
step the peak-RSS mark is reset (``/proc/self/clear_refs``) and the step's peak above its starting
RSS is read from ``VmHWM``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def report_step(step: Callable[[], float]) -> None:
    """In the child: warm-up, then one measured ``step() -> seconds``; prints the JSON result."""
    step()  # warm-up: grads, thread pools
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    base = _status_kib("VmRSS")
    seconds = step()
    print(json.dumps({"peak_mib": (_status_kib("VmHWM") - base) / 1024, "seconds": seconds}))


def measure_in_child(script: str, *args: str) -> dict:
    """Runs ``script child *args`` in a fresh process; its ``report_step`` result."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, script, "child", *args], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
