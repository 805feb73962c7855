"""TensorBoard event files in run.dir/tb (``tracking.tensorboard``): every numeric metric of a
rollout and of each eval, at step = rollout_id (the first eval at -1).

Resume: the writer starts with ``purge_step`` = the first rollout of this attempt, so TensorBoard
drops what a crashed attempt wrote from that rollout on (its events come again from the redo)
and no step appears twice."""

from __future__ import annotations

from pathlib import Path


class TensorBoardBackend:
    def __init__(self, run_dir: Path, first_rollout: int):
        from torch.utils.tensorboard import SummaryWriter

        self.run_id = str(Path(run_dir) / "tb")
        self.writer = SummaryWriter(self.run_id, purge_step=first_rollout if first_rollout > 0 else None)

    def log_metrics(self, kind: str, rollout_id: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, rollout_id)

    def log_file(self, path: Path) -> None:
        pass  # the reward curve is beside the event files already

    def close(self, failed: bool) -> None:
        self.writer.close()
