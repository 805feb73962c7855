"""Child process of test_write_failures.py: does one write under RLIMIT_FSIZE (a write past the
limit fails with EFBIG, a real kernel error) and reports the outcome as JSON on stdout.

Usage: _write_limit_child.py checkpoint-sync|checkpoint-async|plot FOLDER LIMIT_BYTES
"""

import json
import resource
import signal
import sys
from pathlib import Path


def _limit(num_bytes: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process at the limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (num_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def checkpoint(folder: Path, limit: int, async_save: bool) -> None:
    """Saves rollout 0 unlimited, then rollout 1 under the limit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from heron.checkpoint.shards import ModuleShards
    from heron.checkpoint.writer import CheckpointWriter
    from tests.checkpoint_helpers import model_and_optimizer

    model, optimizer = model_and_optimizer(width=256)  # ~0.8 MB of tensors per save
    writer = CheckpointWriter(folder, async_save=async_save)
    writer.save(0, ModuleShards(model, optimizer), {})
    writer.wait()
    _limit(limit)
    writer.save(1, ModuleShards(model, optimizer), {})
    writer.close()


def plot(folder: Path, limit: int) -> None:
    from heron.tracking.plot import plot_reward_curve

    metrics = [{"rollout_id": i, "reward/mean": i / 10} for i in range(10)]
    plot_reward_curve(metrics, [], folder / "reward_curve.png")
    _limit(limit)
    plot_reward_curve(metrics[:5], [], folder / "reward_curve.png")


if __name__ == "__main__":
    mode, folder, limit = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    try:
        if mode == "plot":
            plot(folder, limit)
        else:
            checkpoint(folder, limit, async_save=mode == "checkpoint-async")
        print(json.dumps({"raised": None}))
    except BaseException as e:  # noqa: BLE001 -- reported to the test, whatever it is
        print(json.dumps({"raised": type(e).__name__, "message": str(e), "mro": [c.__name__ for c in type(e).__mro__]}))
