"""The critic: owns the value model and its own AdamW, gives the advantage stage its values and
takes PPO's clipped value-loss steps on the rollout (the same mini-batches and steps as the policy).

Like ``PolicyTrainer`` it knows nothing about where it runs: residency (sleep/wake) and the Ray
host are attached from outside, and each public operation declares what it needs
(``@needs_device`` wakes it if it sleeps; ``@host_only`` never does): see docs/residency.md.

One update (``train``), per mini-batch j of ``train.steps_per_rollout`` (micro-batched like the
policy's -- by row count or packed by ``train.max_tokens_per_micro_batch`` -- gradients
accumulated), with R = the GAE returns and V_old the values the advantages were computed with:

    loss_j = sum_t m_t 0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) / sum_t m_t

(token-mean over the mini-batch, ``heron.algo.value_loss``; c = ``critic.value_clip``), then a
clipped-norm AdamW step at ``critic.lr`` times its schedule (``critic.warmup_steps``,
``critic.lr_schedule``: heron.trainer.lr_schedule, over the run's ``total_steps``; it advances on
applied steps only, as the policy's). The backbone runs under the policy's ``train.precision``
(and ``train.gradient_checkpointing`` and ``train.compile``, set up by ``heron.critic.build``).
Its state is model + AdamW (DCP shards in the checkpoint's ``critic/`` folder) and the LR
scheduler's position (in ``critic/state.json``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

import torch

from heron.algo.masked import masked_mean
from heron.algo.value_loss import clipped_value_loss, explained_variance
from heron.checkpoint.shards import SavedShards, ShardRequest
from heron.config.critic import CriticConfig
from heron.critic.state import CriticCheckpoint
from heron.device import to_host
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.trainer.batch import TrainBatch
from heron.trainer.lr_schedule import build_scheduler
from heron.trainer.optimizer import build_adamw, trained_tensors
from heron.trainer.packing import MicroBatch, micro_batches, stitch
from heron.trainer.precision import forward_context
from heron.trainer.nonfinite import nonfinite_error, nonfinite_values
from heron.trainer.policy_trainer import mean_over_applied

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint

log = logging.getLogger("heron.critic")


class Critic(Resident):
    def __init__(self, model: torch.nn.Module, cfg: CriticConfig, *, steps_per_rollout: int,
                 micro_batch_size: int, on_nonfinite: str = "error", max_tokens_per_micro_batch: int = 0,
                 precision: str = "fp32", total_steps: int = 1):
        """``precision``: the policy's ``train.precision`` (bf16: the backbone runs under autocast,
        float32 master weights; the value head and the loss stay float32, heron.trainer.precision);
        ``total_steps``: optimizer steps of the whole run, the length of a cosine LR schedule."""
        self.model = model.train()
        self._forward_context = forward_context(precision, model)
        self.cfg = cfg
        self.steps_per_rollout = steps_per_rollout
        self.micro_batch_size = micro_batch_size
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch  # > 0: packed as the policy's (heron.trainer.packing)
        self.on_nonfinite = on_nonfinite
        self.optimizer = build_adamw(model, cfg)
        self.scheduler = build_scheduler(self.optimizer, warmup_steps=cfg.warmup_steps, total_steps=total_steps,
                                         schedule=cfg.lr_schedule, min_lr_ratio=cfg.min_lr_ratio)
        scheduled = cfg.warmup_steps > 0 or cfg.lr_schedule != "constant"
        self._checkpoint = CriticCheckpoint(self.model, self.optimizer, self.scheduler, scheduled)

    @property
    @host_only
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @needs_device
    @torch.no_grad()
    def values(self, batch: TrainBatch) -> torch.Tensor:
        """V_t [B, L-1] of every row at the current weights, 0 off the loss positions (on the host)."""
        batch = batch.to(self.device)
        parts = self._micro_batches(batch)
        values = stitch(parts, batch.loss_mask, self._values)
        return to_host(values * batch.loss_mask)  # [B, L-1]

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        """``train.steps_per_rollout`` value-loss steps on the batch's mini-batches (the policy's
        split); returns means over the applied steps: value_loss, clip_frac (tokens whose clipped
        branch won, so no gradient), grad_norm, lr (the one each step used), and over the batch: value_mean (of V_old) and
        explained_variance (1 - Var(R - V_old) / Var(R)), nonfinite_skipped."""
        return {**self._train_steps(batch), **batch_metrics(batch)}

    def _train_steps(self, batch: TrainBatch) -> dict[str, float]:
        """The optimizer steps on the batch's mini-batches; means over the applied steps."""
        if batch.returns is None or batch.old_values is None:
            raise ValueError("the critic trains on returns and old values: the batch has none (algo.advantage=gae sets them)")
        batch = batch.to(self.device)
        mini_size = len(batch) // self.steps_per_rollout
        steps = [self._step(batch.select(slice(i * mini_size, (i + 1) * mini_size)), batch.rollout_id, i)
                 for i in range(self.steps_per_rollout)]
        return mean_over_applied(steps)

    def _step(self, mini: TrainBatch, rollout_id: int, step: int) -> tuple[dict[str, float], bool]:
        """(metric sums, whether applied): one optimizer step; a non-finite loss or grad norm is never applied."""
        normalizer = self._loss_normalizer(mini)
        sums: dict[str, float] = defaultdict(float)
        for micro in (part.batch for part in self._micro_batches(mini)):
            values = self._values(micro)  # [b, l-1]
            out = clipped_value_loss(values, micro.old_values, micro.returns, micro.loss_mask,
                                     clip=self.cfg.value_clip, normalizer=normalizer)
            out.loss.backward()
            sums["value_loss"] += float(out.loss.detach())
            sums["clip_frac"] += float(out.clip_fraction)
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        sums["grad_norm"] = self._clip_grad_norm(max_norm)
        sums["lr"] = self.optimizer.param_groups[0]["lr"]
        found = nonfinite_values(value_loss=sums["value_loss"], grad_norm=sums["grad_norm"])
        if self._nonfinite_anywhere(bool(found)):
            found = found or "value loss or grad_norm on another rank"
            self.optimizer.zero_grad(set_to_none=True)
            if self.on_nonfinite == "error":
                raise nonfinite_error(f"critic {found}", rollout_id, step, self.steps_per_rollout)
            log.warning("skipped critic step %d of rollout %d: non-finite %s (train.on_nonfinite=skip)", step + 1, rollout_id, found)
            return sums, False
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums, True

    def _values(self, micro: TrainBatch) -> torch.Tensor:
        """V [b, l-1] float32 of a micro-batch, the backbone under ``train.precision``."""
        with self._forward_context(micro.input_ids.shape[1]):
            return self.model(micro.input_ids, micro.attention_mask)

    def _micro_batches(self, batch: TrainBatch) -> list[MicroBatch]:
        """By row count, or packed under ``train.max_tokens_per_micro_batch`` like the policy's."""
        return micro_batches(batch, self.micro_batch_size, self.max_tokens_per_micro_batch, self._micro_batch_count)

    # --- what a data-parallel critic changes (heron.parallel.dp_critic) -------------------------
    def _loss_normalizer(self, mini: TrainBatch) -> float:
        """Token-mean over the whole mini-batch: its loss-token count."""
        return max(mini.num_loss_tokens, 1.0)

    def _clip_grad_norm(self, max_norm: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))

    def _nonfinite_anywhere(self, here: bool) -> bool:
        return here

    def _micro_batch_count(self, count: int) -> int:
        return count

    def _writes_shared_files(self) -> bool:
        """Whether this process writes the checkpoint's ``critic/state.json`` (one rank of a group)."""
        return True

    @host_only
    def holdings(self) -> Holdings:
        """Params, grads, optimizer state and buffers of the value model; the model is guarded
        while asleep, and so is the optimizer's step."""
        model, optimizer = self.model, self.optimizer
        return Holdings(lambda: trained_tensors(model, optimizer), [("critic", model)], [optimizer], device=self.device)

    # --- checkpoint: the critic's part of the run's one save path (heron.critic.state) ---------
    @needs_device
    def save_state(self, request: ShardRequest) -> SavedShards:
        """Writes (or, async, stages) value model + AdamW into the checkpoint's ``critic/``
        folder; returns their fingerprint. An async save copies the live tensors after this
        returns; the optimizer's step and a sleep wait for that copy (heron.checkpoint.shards)."""
        with self._hold_while_read("async checkpoint staging", request.async_save) as release:
            return self._checkpoint.save(request, primary=self._writes_shared_files(), on_staged=release)

    @host_only
    def wait_saved(self) -> dict[str, str]:
        """Waits for the critic's shard write in flight; {path: checksum} of its files."""
        return self._checkpoint.wait_saved()

    @needs_device
    def load_state(self, checkpoint: Checkpoint) -> None:
        """Restores value model + AdamW from the checkpoint's ``critic/`` folder, after checking
        that they fit (one-line error, nothing loaded, if not)."""
        self._checkpoint.load(checkpoint)


def batch_metrics(batch: TrainBatch) -> dict[str, float]:
    """Over the whole rollout (V_old, R of every loss token): value_mean and explained_variance
    (1 - Var(R - V_old) / Var(R)). A data-parallel critic computes them where the whole batch is
    (``heron.cluster.critic_group``)."""
    return {
        "value_mean": float(masked_mean(batch.old_values, batch.loss_mask)),
        "explained_variance": explained_variance(batch.old_values, batch.returns, batch.loss_mask),
    }
