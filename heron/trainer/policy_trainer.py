"""The policy trainer: owns the model, AdamW, the LR schedule and (optionally) a frozen
reference model, and turns a ``TrainBatch`` into ``train.steps_per_rollout`` optimizer steps.

It knows nothing about where it runs: devices, offload and distribution are applied from
outside (residency and cluster layers). Each public operation declares what it needs
(``@needs_device`` wakes the trainer if it sleeps; ``@host_only`` never does): see
docs/residency.md.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from heron.algo.loss_agg import LossNormalizer, normalizer
from heron.checkpoint.run_state import TrainerState
from heron.checkpoint.shards import ModuleShards, SavedShards, ShardRequest
from heron.config.train import TrainConfig
from heron.device import to_host
from heron.residency import Holdings, Resident, host_only, needs_device
from heron.residency.snapshot import host_snapshot
from heron.trainer.batch import TrainBatch
from heron.trainer.logprob_mismatch import combine_stats, mismatch_metrics, mismatch_stats
from heron.trainer.lm_head_chunks import plain_head_reason
from heron.trainer.logprobs import forward_logprobs
from heron.trainer.lr_schedule import build_scheduler
from heron.trainer.model_flops import ForwardCost, forward_cost
from heron.trainer.nonfinite import nonfinite_error, nonfinite_values
from heron.trainer.objectives import Objective
from heron.trainer.optimizer import build_adamw, trained_tensors
from heron.trainer.old_logprobs import plan_old_logprobs
from heron.trainer.packing import MicroBatch, micro_batches, stitch, trained_rows
from heron.trainer.precision import forward_context
from heron.trainer.shared_prompts import SharedLayout, plan, unsupported_reason
from heron.trainer.zero_advantage import rows_with_gradient
from heron.weights.handle import InMemory, WeightHandle

if TYPE_CHECKING:
    from heron.checkpoint.reader import Checkpoint

log = logging.getLogger("heron.trainer")


class PolicyTrainer(Resident):
    def __init__(
        self,
        model: torch.nn.Module,
        cfg: TrainConfig,
        objective: Objective,
        *,
        total_steps: int,
        temperature: float = 1.0,
        reference: torch.nn.Module | None = None,
        engine_view: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    ):
        if objective.needs_reference and reference is None:
            raise ValueError("the objective needs a reference model (algo.kl_coef > 0) but none was given")
        self.model = model.train()
        self.cfg = cfg
        self.objective = objective
        self.temperature = temperature
        self.reference = reference.eval().requires_grad_(False) if reference is not None else None
        # engines' weights from the trainer's state dict (LoRA: merged, heron.lora.engine_view)
        self._engine_view = engine_view or (lambda state: state)
        self.optimizer = build_adamw(model, cfg)  # frozen parameters (LoRA's base weights) get no state
        self.scheduler = build_scheduler(
            self.optimizer, warmup_steps=cfg.warmup_steps, total_steps=total_steps,
            schedule=cfg.lr_schedule, min_lr_ratio=cfg.min_lr_ratio,
        )
        self.version = 0  # policy version: number of train() calls applied to the weights
        self.old_logprob_plan = plan_old_logprobs(cfg, objective)  # where pi_old comes from (heron.trainer.old_logprobs)
        log.info("old logprobs: %s (%s)", self.old_logprob_plan.source, self.old_logprob_plan.reason)
        self._forward_context = forward_context(cfg.precision, model, cfg.attention_backend)  # heron.trainer.precision
        self.flops = _forward_cost(model)  # model FLOPs per token and attention pair (None: not sized)
        self._model_flops: torch.Tensor | float = 0.0  # of the forwards and backwards since train() began
        self._answers_only = self._answer_head(model)  # the head at the answer positions only (lm_head_chunks)
        self._share_cost = self._prompt_sharing(model)  # None: one padded row per sample (heron.trainer.shared_prompts)
        self._shards: ModuleShards | None = None  # checkpoint writer of this process, made at the first save
        self._publish_weights()

    @property
    @host_only
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @needs_device
    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> torch.Tensor:
        """Logprobs [B, L-1] of the batch under the current (or reference) weights, on the host."""
        return to_host(self._logprobs(batch.to(self.device), reference=reference))

    @torch.no_grad()
    def _logprobs(self, batch: TrainBatch, *, reference: bool = False, parts: list[MicroBatch] | None = None) -> torch.Tensor:
        """Logprobs [B, L-1] of a batch on the trainer's device, on that device; ``parts``: of
        those micro-batches' rows only (0 elsewhere; default: every row)."""
        model = self.reference if reference else self.model
        if model is None:
            raise ValueError("no reference model: set algo.kl_coef > 0 to load one")
        parts = self._micro_batches(batch) if parts is None else parts
        logprobs = stitch(parts, batch.loss_mask, lambda micro: self._model_logprobs(model, micro)[0])
        return logprobs * batch.loss_mask  # [B, L-1]

    @needs_device
    def train(self, batch: TrainBatch) -> dict[str, float]:
        """``steps_per_rollout`` optimizer steps on ``batch``; returns metrics averaged over the
        applied steps, plus ``nonfinite_skipped`` (steps skipped, see heron.trainer.nonfinite),
        ``old_logprobs_recomputed`` (1: a separate forward computed pi_old, see
        heron.trainer.old_logprobs), the engine-mismatch metrics (when pi_old is the trainer's) and
        ``model_flops``: the model FLOPs of every forward and backward this call ran, over the rows
        each ran on (heron.trainer.model_flops; rows skipped for a zero advantage not included;
        data-parallel: all ranks' together)."""
        batch = batch.to(self.device)
        self._model_flops = 0.0
        self._forward_mismatch: list[torch.Tensor] = []  # filled when the training forward gives pi_old
        mismatch = self._recompute_old_logprobs(batch) if self.old_logprob_plan.runs_forward else {}
        ref_logprobs = self._logprobs(batch, reference=True) if self.objective.needs_reference else None
        mini_size = len(batch) // self.cfg.steps_per_rollout
        steps = []
        for step in range(self.cfg.steps_per_rollout):
            index = slice(step * mini_size, (step + 1) * mini_size)
            ref = ref_logprobs[index] if ref_logprobs is not None else None
            steps.append(self._optimizer_step(batch.select(index), ref, step))
        self.version += 1
        self._publish_weights()
        if self._forward_mismatch:
            mismatch = self._mismatch_metrics(combine_stats(self._forward_mismatch))
        recomputed = float(self.old_logprob_plan.runs_forward)
        flops = {} if self.flops is None else {"model_flops": self._sum_over_ranks(float(self._model_flops))}
        return {**mean_over_applied(steps), **mismatch, "old_logprobs_recomputed": recomputed, **flops}

    def _recompute_old_logprobs(self, batch: TrainBatch) -> dict[str, float]:
        """Replaces the engine's logprobs by the trainer's and sets the mismatch correction; the
        metrics: mean / max |engine - trainer logprob| (``heron.trainer.logprob_mismatch``) and the
        correction's own (``algo.off_policy``). Rows without a gradient keep the engine's values and
        stay out of the metrics when ``train.skip_zero_advantage`` applies: their pi_old is never used."""
        engine_logprobs, mask = batch.old_logprobs, batch.loss_mask
        rows = self._rows_with_gradient(batch)
        if rows is None:
            batch.old_logprobs = self._logprobs(batch)
        else:  # rows without an advantage never use pi_old (heron.trainer.zero_advantage): their forward is skipped
            parts = self._micro_batches(batch, rows)
            computed = torch.zeros(len(batch), 1, dtype=mask.dtype, device=mask.device)  # [B, 1]
            computed[trained_rows(parts)] = 1.0
            mask = mask * computed  # [B, L-1]: the loss positions of the rows computed
            batch.old_logprobs = torch.where(mask > 0, self._logprobs(batch, parts=parts), engine_logprobs)
        batch.mismatch_weights, metrics = self.objective.engine_mismatch(
            batch.old_logprobs, engine_logprobs, mask, self._token_count(replace(batch, loss_mask=mask))
        )
        stats = mismatch_stats(engine_logprobs, batch.old_logprobs, mask)
        return {**self._mismatch_metrics(stats), **metrics}

    def _own_old_logprobs(self, micro: TrainBatch, logprobs: torch.Tensor) -> TrainBatch:
        """``micro`` with pi_old from this training forward (detached); the engine's logprobs it
        replaces go into the mismatch metrics, as a separate recompute would give them."""
        own = logprobs.detach() * micro.loss_mask  # [b, L-1]
        self._forward_mismatch.append(mismatch_stats(micro.old_logprobs, own, micro.loss_mask))
        return replace(micro, old_logprobs=own)

    def _mismatch_metrics(self, stats: torch.Tensor) -> dict[str, float]:
        """mean / max |engine - trainer logprob| over the loss tokens (``heron.trainer.logprob_mismatch``;
        data-parallel trainers reduce the stats over ranks first)."""
        return mismatch_metrics(stats)

    @needs_device
    @torch.no_grad()
    def sequence_kl(self, batch: TrainBatch) -> list[float]:
        """sum_t KL_t per sequence between the rollout policy (old logprobs: recomputed, or the
        engine's) and the reference, for ``algo.kl_in_reward`` (``heron.algo.kl.sequence_kl``)."""
        batch = batch.to(self.device)
        old = self._logprobs(batch) if self.cfg.recompute_old_logprobs else batch.old_logprobs
        ref = self._logprobs(batch, reference=True)
        return self.objective.reward_kl(old, ref, batch.loss_mask).tolist()

    def _publish_weights(self) -> None:
        """Refreshes the host snapshot ``weights()`` hands out. Every operation that changes the
        weights or ``version`` (train, loading a checkpoint) must end with it."""
        self._host_weights = self._engine_view(host_snapshot(self.model))
        self._host_weights_version = self.version

    def _optimizer_step(self, mini: TrainBatch, ref_logprobs: torch.Tensor | None, step: int) -> tuple[dict[str, float], bool]:
        """(metric sums, whether the step was applied): a non-finite loss or grad norm is never applied."""
        sums: dict[str, float] = defaultdict(float)
        parts, normalizer, skipped = self._parts_to_train(mini)
        if skipped is not None:
            sums["zero_advantage_skipped"] = skipped
        loss_sum = 0.0
        for part in parts:
            micro = part.batch
            logprobs, entropy = self._model_logprobs(self.model, micro, with_entropy=True,
                                                     entropy_grad=self.objective.entropy_in_loss)
            ref = part.take(ref_logprobs) if ref_logprobs is not None else None
            if self.old_logprob_plan.source == "training_forward":  # the weights pi_old is defined at
                micro = self._own_old_logprobs(micro, logprobs)
            loss, metrics = self.objective(micro, logprobs, entropy, ref, normalizer)
            loss.backward()
            loss_sum += float(loss.detach())
            for key, value in metrics.items():
                sums[key] += float(value)
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        sums["grad_norm"] = self._clip_grad_norm(max_norm)
        sums["lr"] = self.optimizer.param_groups[0]["lr"]
        found = nonfinite_values(loss=loss_sum, grad_norm=sums["grad_norm"])
        if self._nonfinite_anywhere(bool(found)):
            self._skip_step(found or "loss or grad_norm on another rank", mini.rollout_id, step)
            return sums, False
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums, True

    def _model_logprobs(self, model: torch.nn.Module, micro: TrainBatch, with_entropy: bool = False,
                        entropy_grad: bool = True):
        """(logprobs, entropy or None) [b, l-1] of ``micro`` under ``model``, float32
        (heron.trainer.logprobs; ``train.precision``: heron.trainer.precision). Counts the forward's
        model FLOPs, and its backward's when autograd records it (one follows)."""
        if self.flops is not None:
            lengths = micro.attention_mask.sum(dim=-1)  # [b] tokens of each row
            grad = torch.is_grad_enabled()
            self._model_flops = self._model_flops + (self.flops.training if grad else self.flops.forward)(lengths)
        return forward_logprobs(
            model, micro.input_ids, micro.attention_mask, self.temperature, with_entropy,
            chunk_size=self.cfg.logprob_chunk_size, forward_context=self._forward_context,
            layout=self._shared_layout(micro), scored=micro.answer_positions() if self._answers_only else None,
            entropy_grad=entropy_grad,
        )

    @staticmethod
    def _answer_head(model: torch.nn.Module) -> bool:
        """Whether the output head runs at the answer positions alone (heron.trainer.lm_head_chunks):
        nothing reads a logprob elsewhere. The reference takes the policy's choice: it is the same
        model (``model.path``, or the policy with its LoRA adapters disabled)."""
        reason = plain_head_reason(model)
        if reason is not None:
            log.info("output head: at every position (%s)", reason)
        return reason is None

    def _prompt_sharing(self, model: torch.nn.Module) -> ForwardCost | None:
        """The cost model of ``train.share_prompts`` for the policy (heron.trainer.shared_prompts),
        or None: one padded row per sample. The reference forward takes the policy's layout: it is
        the same model (``model.path``, or the policy with its LoRA adapters disabled). With the
        head at the answer positions only, both layouts run it at the same positions, so the
        choice weighs the rest of the model (``ForwardCost.without_head``)."""
        if not self.cfg.share_prompts:
            return None
        reason = unsupported_reason(model)
        if reason is not None:
            log.info("train.share_prompts: one padded row per sample (%s)", reason)
            return None
        if self.flops is None or not self._answers_only:
            return self.flops
        return self.flops.without_head()

    def _shared_layout(self, micro: TrainBatch) -> SharedLayout | None:
        """``micro`` packed so that the samples of a prompt share it (``train.share_prompts``),
        or None: one padded row per sample."""
        if self._share_cost is None or micro.prompt_lengths is None:
            return None
        return plan(micro.input_ids, micro.attention_mask, micro.prompt_lengths, self._share_cost)

    def _micro_batches(self, mini: TrainBatch, rows: list[int] | None = None) -> list[MicroBatch]:
        """By row count, or packed by ``train.max_tokens_per_micro_batch`` (heron.trainer.packing);
        ``rows``: only those rows (None: all)."""
        return micro_batches(
            mini, self.cfg.micro_batch_size, self.cfg.max_tokens_per_micro_batch, self._micro_batch_count, rows,
            share_cost=self._share_cost,
        )

    def _parts_to_train(self, mini: TrainBatch) -> tuple[list[MicroBatch], LossNormalizer, float | None]:
        """(micro-batches, normaliser, share of rows left out or None) of one optimizer step.
        ``train.skip_zero_advantage`` on an objective whose zero-advantage rows have no gradient
        (heron.trainer.zero_advantage): only the rows with one, the loss normaliser still the
        whole mini-batch's, the diagnostics' that of the rows trained. Data-parallel ranks then
        agree on a micro-batch count (a collective) whatever each leaves out."""
        normalizer = self._loss_normalizer(mini)
        rows = self._rows_with_gradient(mini)
        if rows is None:
            return self._micro_batches(mini), normalizer, None
        parts = self._micro_batches(mini, rows)
        trained = mini.take(trained_rows(parts), mini.input_ids.shape[1])
        normalizer = replace(normalizer, metric=self._loss_normalizer(trained).metric)
        return parts, normalizer, 1.0 - len(trained) / len(mini)

    @property
    @host_only
    def skips_zero_advantage_rows(self) -> bool:
        """``train.skip_zero_advantage`` applies to this objective (heron.trainer.zero_advantage):
        rows without an advantage run no forward. A data-parallel group weighs its ranks' work by
        it (heron.parallel.rank_balance)."""
        return self.cfg.skip_zero_advantage and self.objective.zero_advantage_idle

    def _rows_with_gradient(self, batch: TrainBatch) -> list[int] | None:
        """The rows of ``batch`` with a gradient when ``train.skip_zero_advantage`` applies to the
        objective (heron.trainer.zero_advantage), else None: train every row."""
        if not self.skips_zero_advantage_rows:
            return None
        return rows_with_gradient(batch.advantages, batch.loss_mask)

    def _micro_batch_count(self, count: int) -> int:
        """How many packed micro-batches every rank runs (data-parallel trainers: the largest count)."""
        return count

    def _sum_over_ranks(self, value: float) -> float:
        """``value`` summed over the data-parallel ranks (one process: itself)."""
        return value

    def _nonfinite_anywhere(self, here: bool) -> bool:
        """Whether any rank found a non-finite value (data-parallel trainers all-reduce it)."""
        return here

    def _skip_step(self, found: str, rollout_id: int, step: int) -> None:
        """Drops the gradients of a non-finite step; raises under ``train.on_nonfinite=error``."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.cfg.on_nonfinite == "error":
            raise nonfinite_error(found, rollout_id, step, self.cfg.steps_per_rollout)
        log.warning("skipped optimizer step %d of rollout %d: non-finite %s (train.on_nonfinite=skip)", step + 1, rollout_id, found)

    def _loss_normalizer(self, mini: TrainBatch) -> LossNormalizer:
        """Divisors of every loss term and metric for the mini-batch (``heron.algo.loss_agg``;
        token-mean: its loss-token count). Data-parallel trainers all-reduce the sums
        (``heron.parallel``)."""
        return normalizer(*self.objective.denominators(mini.loss_mask))

    def _token_count(self, batch: TrainBatch) -> float:
        """Divisor that turns token sums over ``batch`` into means (data-parallel trainers: this
        rank's share of the global count, so the rank mean of the metric is the global mean)."""
        return max(batch.num_loss_tokens, 1.0)

    def _clip_grad_norm(self, max_norm: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))

    @host_only
    def weights(self) -> WeightHandle:
        """The current policy weights for pushing to the engine: a host snapshot taken at the
        end of ``train()``, so handing them out never wakes the trainer. Read-only."""
        return WeightHandle(self.version, InMemory(self.host_weights()))

    @host_only
    def host_weights(self) -> dict[str, torch.Tensor]:
        """The host snapshot of the current weights (every ``state_dict`` name of the model
        engines serve: with LoRA, the merged weights). Read-only."""
        if self._host_weights_version != self.version:
            raise RuntimeError(
                f"the host snapshot of the weights is of version {self._host_weights_version} but the trainer is at "
                f"{self.version}: the operation that changed them must call _publish_weights()"
            )
        return self._host_weights

    @host_only
    def holdings(self) -> Holdings:
        """Params, grads, optimizer state, buffers and the frozen reference model; the model and
        the reference are guarded while asleep, and so is the optimizer's step."""
        model, reference, optimizer = self.model, self.reference, self.optimizer

        def inventory():
            return {
                **trained_tensors(model, optimizer),
                "reference": [] if reference is None else [*reference.parameters(), *reference.buffers()],
            }

        modules = [("model", model)] + ([("reference", reference)] if reference is not None else [])
        return Holdings(inventory, modules, [optimizer], device=self.device)

    # --- checkpoint (heron.checkpoint) ---------------------------------------------------------
    @needs_device
    def save_state(self, request: ShardRequest) -> SavedShards:
        """Writes model + optimizer shards for ``request`` (``heron.checkpoint.shards``) and
        returns them with the ``TrainerState`` (policy version, scheduler). Needs the live
        tensors: an async save copies them in its own thread after this returns, and until then
        the optimizer's step waits for the copy and a sleep waits for its hold (heron.checkpoint.shards);
        the files are finished in the background (``wait_saved``)."""
        if self._shards is None:
            self._shards = ModuleShards(self.model, self.optimizer)
        primary = self._holds_full_weights()
        hf_weights = self.host_weights() if request.hf_export and primary else None
        with self._hold_while_read("async checkpoint staging", request.async_save) as release:
            saved = self._shards.save_state(request, hf_weights, primary=primary, on_staged=release)
        return replace(saved, trainer=TrainerState(self.version, self.scheduler.state_dict()))

    @host_only
    def wait_saved(self) -> dict[str, str]:
        """Waits for this trainer's shard write in flight; {path: checksum} of its files."""
        return {} if self._shards is None else self._shards.wait_saved()

    @needs_device
    def load_state(self, checkpoint: Checkpoint, run_config: dict) -> TrainerState:
        """Restores what ``save_state`` saved from a verified ``Checkpoint``, after checking that
        it fits this model, optimizer and ``run_config`` (one-line error, nothing loaded, if not)."""
        from heron.checkpoint.reader import load_into
        from heron.checkpoint.resume import check_fits

        state = checkpoint.trainer_state()
        check_fits(checkpoint, self.model, self.optimizer, run_config)
        if self._shards is not None:
            self._shards.wait_staged()  # the load writes into the tensors an async save may be copying
        load_into(checkpoint, self.model, self.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.version = state.version
        self._publish_weights()
        return state

    def _holds_full_weights(self) -> bool:
        """Whether this process holds the full weights (and so writes the checkpoint-wide
        files): always in one process; rank 0 of a data-parallel group."""
        return True

    @needs_device
    def export_hf(self, out_dir: str | Path, tokenizer=None) -> Path:
        """Writes an HF folder (safetensors, config, generation config, tokenizer)."""
        out_dir = Path(out_dir)
        self.model.save_pretrained(out_dir)
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)
        return out_dir


def _forward_cost(model: torch.nn.Module) -> ForwardCost | None:
    """``model``'s FLOP estimates, or None for a model whose config does not give its size (no
    ``train/model_flops`` then; the shared-prompt layout knows none of those models)."""
    try:
        return forward_cost(model)
    except (AttributeError, TypeError) as err:
        log.warning("train/model_flops: not reported (the model config does not give its size: %s)", err)
        return None


def mean_over_applied(steps: list[tuple[dict[str, float], bool]]) -> dict[str, float]:
    """Mean of each metric over the applied steps (over all steps if none was applied, so a
    rollout whose every step was skipped shows its nan loss), plus ``nonfinite_skipped``."""
    applied = [sums for sums, ok in steps if ok] or [sums for sums, _ in steps]
    means = {key: sum(s[key] for s in applied) / len(applied) for key in applied[0]}
    return {**means, "nonfinite_skipped": float(sum(not ok for _, ok in steps))}
