"""The verbs of one RL run. The loop (``heron.loop``) composes them; each verb is a call into
a component and records its own wall time, so the loop stays one screen of named steps."""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from heron.atomic_file import write_atomically
from heron.checkpoint.checkpointer import Checkpointer
from heron.build import build_components
from heron.components import Components
from heron.config.base import to_dict
from heron.config.root import HeronConfig
from heron.interrupt import RunInterrupted, install_interrupt_handlers, interrupt_signal, signals_held
from heron.plugins.postprocess import apply_postprocess, checked_prompts
from heron.preflight import preflight
from heron.records import RolloutBatch
from heron.run_dir import hold_run_folders
from heron.tracking.profiler import RolloutProfiler, stage
from heron.tracking.tracker import Tracker
from heron.trainer.batch import collate
from heron.trainer.reward_kl import reward_kl_penalties
from heron.weights.version import check_served_versions


class RLRun:
    def __init__(self, cfg: HeronConfig):
        install_interrupt_handlers()  # SIGTERM unwinds like Ctrl-C (heron.interrupt)
        self.cfg = cfg
        self.run_dir = Path(cfg.run.dir)
        self.rollout_id: int | None = None  # the rollout in progress, named if interrupted
        checked = preflight(cfg)  # every input check, before anything is written or loaded
        with ExitStack() as undo:  # a failure part-way stops the actors and releases the folders
            undo.enter_context(hold_run_folders(cfg))  # one run per folder: fails before any model is loaded
            self.c: Components = build_components(cfg, checked)
            undo.callback(_with_signals_held, self.c.close)
            self.checkpointer = Checkpointer(cfg, self.run_dir)  # resume: checks fit, restores state
            self.start_rollout = self.checkpointer.resume(self.c)
            self.rollout_id = self.start_rollout
            self.timings: dict[str, float] = {}
            if self.start_rollout > 0:
                self.push_weights()  # the engine serves the restored policy, through the one push path
            _write_config(cfg, self.run_dir / "config.yaml")
            self.tracker = Tracker(cfg.tracking, self.run_dir, self.start_rollout, cfg.rollout.num_rollouts, to_dict(cfg))
            self.profiler = RolloutProfiler(cfg.tracking.profile, self.run_dir, self.c.executor, self.tracker.print)
            self._release = undo.pop_all()

    def __enter__(self) -> "RLRun":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with signals_held() as held:  # a second Ctrl-C must not abandon actors or a save half-way
            self._close(exc)
        signum = interrupt_signal(exc) or next(iter(held), None)
        if signum is not None:  # Ctrl-C / SIGTERM: one line in the CLI (heron.interrupt)
            raise RunInterrupted(signum, self.rollout_id, self.checkpointer.last_checkpoint()) from None

    def _close(self, failure: BaseException | None) -> None:
        """``failure``: the error the run is stopping on; a later one is logged, so the first
        error is the one reported (see ``Checkpointer.close`` for the one exception)."""
        failing = failure is not None
        try:  # waits for an async save in flight; raises its error unless already failing
            self.checkpointer.close(failure)
        except BaseException:
            failing = True
            raise
        finally:
            try:
                self.tracker.close(raise_error=not failing)
            finally:
                self._release.close()  # stops actors and the Ray session a ray backend started; unlocks run.dir

    def rollout_ids(self) -> range:
        return range(self.start_rollout, self.cfg.rollout.num_rollouts)

    @contextmanager
    def _timed(self, name: str):
        start = time.perf_counter()
        with stage(name):  # the stage's range in a profile (tracking.profile)
            yield
        self.timings[f"time/{name}_s"] = time.perf_counter() - start

    def profiled(self, rollout_id: int):
        """The context of one rollout's steps: torch.profiler records them when
        ``tracking.profile.rollouts`` names the rollout (heron.tracking.profiler)."""
        return self.profiler.rollout(rollout_id)

    def generate(self, rollout_id: int) -> RolloutBatch:
        self.rollout_id = rollout_id
        self.timings = {"_start": time.perf_counter()}
        with self._timed("generate"):
            n = self.cfg.rollout.batch_size
            prompts = checked_prompts(self.c.sampler.get_samples(n), n, self.cfg.hooks.data_source)
            return self.c.generator.generate(rollout_id, prompts)

    def reward(self, batch: RolloutBatch) -> RolloutBatch:
        with self._timed("reward"):
            return self.c.scorer.score(batch)

    def advantages(self, batch: RolloutBatch) -> RolloutBatch:
        """algo.advantage (or hooks.advantage) over the whole batch, or GAE over the critic's values
        (algo.advantage=gae); with algo.kl_in_reward the estimator sees r - kl_coef * KL (the
        trainer computes KL, heron.trainer.reward_kl)."""
        penalties = reward_kl_penalties(self.c.trainer, batch, self.c.tokenizer.pad_token_id, self.cfg.algo)
        return self.c.assign_advantages(batch, penalties)

    def postprocess(self, batch: RolloutBatch) -> RolloutBatch:
        """hooks.rollout_data_postprocess(config, rollout_id, rollout_data), if configured."""
        return apply_postprocess(self.c.hooks.rollout_data_postprocess, self.cfg.hooks, batch)

    def train(self, batch: RolloutBatch) -> dict[str, float]:
        with self._timed("train"):
            return self.c.train(collate(batch.samples, self.c.tokenizer.pad_token_id))

    def push_weights(self) -> None:
        with self._timed("push_weights"):
            handle = self.c.trainer.weights()
            self.c.engine.load_weights(handle)
            check_served_versions(self.c.engine.served_versions(), handle.version)

    def checkpoint(self, rollout_id: int) -> None:
        """Saves every ``checkpoint.interval`` rollouts and after the last (see heron.checkpoint)."""
        with stage("checkpoint"):
            self.checkpointer.maybe_save(rollout_id, self.c)

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        """Eval before the first rollout (``rollout_id=-1``), every ``eval.interval`` and at the end."""
        if self.c.evaluator is None or not self._eval_due(rollout_id):
            return {}
        with self._timed("eval"):
            metrics = self.c.evaluator.evaluate(self.c.engine)
        self.tracker.log_eval(rollout_id, self.c.engine.policy_version, metrics)
        return metrics

    def _eval_due(self, rollout_id: int) -> bool:
        last = self.cfg.rollout.num_rollouts - 1
        if rollout_id == -1:
            return self.start_rollout == 0  # a resumed run already has its initial eval
        return rollout_id == last or (rollout_id + 1) % self.cfg.eval.interval == 0

    def log(self, batch: RolloutBatch, train_metrics: dict, eval_metrics: dict) -> dict:
        rewards = [s.reward for s in batch.samples]
        lengths = [len(s.response_tokens) for s in batch.samples]
        rollout_s = time.perf_counter() - self.timings["_start"]
        record = {
            "rollout_id": batch.rollout_id,
            "policy_version": self.c.trainer.version,
            "reward/mean": statistics.fmean(rewards),
            "reward/std": statistics.pstdev(rewards),
            "response/length_mean": statistics.fmean(lengths),
            "response/truncated_fraction": statistics.fmean(s.finish_reason == "length" for s in batch.samples),
            "staleness/max": max(batch.rollout_id - s.policy_version for s in batch.samples),
            **self.c.scorer.metrics(),
            **self.c.data_metrics,
            **{(k if k.startswith("critic/") else f"train/{k}"): v for k, v in train_metrics.items()},
            **eval_metrics,
            **{k: v for k, v in self.timings.items() if not k.startswith("_")},
            **self.c.residency.metrics(),
            "time/rollout_s": rollout_s,
            **_throughput(len(batch.samples), sum(lengths), rollout_s - self.timings.get("time/eval_s", 0.0)),
            **_train_rate(train_metrics.get("model_flops"), self.timings.get("time/train_s"), self.cfg.train.world_size,
                          self.cfg.tracking.peak_tflops),
        }
        self.tracker.log_rollout(record)
        return record


def _throughput(num_samples: int, num_response_tokens: int, seconds: float) -> dict[str, float]:
    """The rollout's samples and generated tokens per second of its training work (generation to
    weight push: ``time/rollout_s`` less ``time/eval_s``), the figures to compare between configs."""
    seconds = max(seconds, 1e-9)
    return {"perf/samples_per_s": num_samples / seconds, "perf/response_tokens_per_s": num_response_tokens / seconds}


def _train_rate(model_flops: float | None, seconds: float | None, ranks: int, peak_tflops: float) -> dict[str, float]:
    """``perf/train_tflops``: the model FLOPs the train stage ran (``train/model_flops``, all ranks'
    together) per second of the stage; ``perf/mfu``: per device (``ranks`` of them), as a fraction
    of ``tracking.peak_tflops`` (when set). Nothing when the trainer does not size its model."""
    if model_flops is None or seconds is None:
        return {}
    tflops = model_flops / max(seconds, 1e-9) / 1e12
    rate = {"perf/train_tflops": tflops}
    if peak_tflops > 0:
        rate["perf/mfu"] = tflops / ranks / peak_tflops
    return rate


def _with_signals_held(close) -> None:
    with signals_held():
        close()


def _write_config(cfg: HeronConfig, path: Path) -> None:
    import yaml

    write_atomically(path, yaml.safe_dump(to_dict(cfg), sort_keys=False).encode())
