"""The trainer endpoint: what the run may ask of whatever trains the policy.

One protocol, two implementations today: ``PolicyTrainer`` (this process) and
``heron.cluster.trainer_group.TrainerGroup`` (the driver's stand-in for data-parallel rank
actors on Ray). The run, the checkpointer and the residency layer talk to this protocol only;
they never look inside a trainer or ask which kind it is.

Contract every trainer keeps:
- ``train(batch)`` takes ``train.steps_per_rollout`` optimizer steps on a rollout and returns its
  metrics (means over steps); afterwards ``version`` is one higher.
- ``weights()`` hands out the weights of the current ``version`` as a ``WeightHandle`` without
  waking the trainer (a host snapshot taken at the end of ``train``); ``host_weights()`` gives the
  full state dict on the host whatever the transport (export, tests).
- ``save_state(request)`` writes model + optimizer shards (DCP) into the request's folder (every
  rank its own) and returns the fingerprint with the typed ``TrainerState``; an async request
  returns at once, and a background thread copies the live tensors to host and writes the files;
  until the copy is done the optimizer's step, ``load_state`` and a sleep wait for it
  (``heron.checkpoint.shards``). ``wait_saved()`` waits for those files and returns their
  checksums (it never wakes the trainer).
- ``load_state(checkpoint, run_config)`` checks that the checkpoint fits (one-line error, nothing
  loaded, if not), loads it and returns the ``TrainerState`` it restored; the next ``weights()``
  serves the loaded version.
- ``sequence_kl(batch)`` gives, per row in batch order, sum_t KL_t between the rollout policy and
  the frozen reference (``algo.kl_in_reward``; needs ``algo.kl_coef > 0``); it changes nothing.
- ``holdings()`` declares what the trainer holds on its device, for the residency layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from heron.checkpoint.reader import Checkpoint
    from heron.checkpoint.run_state import TrainerState
    from heron.checkpoint.shards import SavedShards, ShardRequest
    from heron.residency.state import Holdings
    from heron.trainer.batch import TrainBatch
    from heron.weights.handle import WeightHandle


class Trainer(Protocol):
    version: int
    """Policy version: number of ``train`` calls applied to the weights (restored on resume)."""

    def train(self, batch: TrainBatch) -> dict[str, float]: ...

    def sequence_kl(self, batch: TrainBatch) -> list[float]: ...

    def weights(self) -> WeightHandle: ...

    def host_weights(self) -> dict[str, torch.Tensor]: ...

    def save_state(self, request: ShardRequest) -> SavedShards: ...

    def wait_saved(self) -> dict[str, str]: ...

    def load_state(self, checkpoint: Checkpoint, run_config: dict) -> TrainerState: ...

    def holdings(self) -> Holdings: ...

    def memory_report(self) -> dict[str, int]: ...
