"""``heron eval --config C --checkpoint PATH``: the run's eval sets on one policy, without
training, written as the same records a training run's eval writes (``eval.jsonl``).

PATH is a heron checkpoint (``rollout-000012``: verified, exported to a temporary HF folder
inside run.dir, removed at the end) or an HF model folder. The policy is served by the config's
engine (``engine.kind``) in this process, and evaluated by the same ``EvalSuite`` with the same
greedy decoding and the same eval sampling seeds as in training, so a checkpoint's numbers equal
what its run logged for it.

Output: ``<run.dir>/eval.jsonl``, one record per call, appended (an earlier ``heron eval``'s
records there are kept). run.dir is locked like a training run's, and a folder that holds a
training run (its metrics.jsonl or checkpoints) is refused: heron eval never adds to, or
touches, a training run's files (resume rewrites eval.jsonl by rollout_id)."""

from __future__ import annotations

import logging
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from heron.config.base import ConfigError
from heron.config.root import HeronConfig

log = logging.getLogger("heron.eval")


@dataclass(frozen=True)
class EvalTarget:
    """What ``--checkpoint`` names: a heron checkpoint (with its rollout and policy version) or an HF folder."""

    path: Path
    rollout_id: int | None = None  # None: an HF folder, which carries no run position
    policy_version: int | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.rollout_id is not None


@dataclass(frozen=True)
class EvalRecord:
    """One line of eval.jsonl: the training run's eval record plus the policy evaluated."""

    checkpoint: str
    rollout_id: int | None
    policy_version: int | None
    metrics: dict[str, float]

    def to_json(self) -> dict:
        position = {k: v for k, v in (("rollout_id", self.rollout_id), ("policy_version", self.policy_version)) if v is not None}
        return {"checkpoint": self.checkpoint, **position, **self.metrics}


def resolve_target(path: str) -> EvalTarget:
    """A heron checkpoint (``state.json`` + manifest, verified) or an HF folder (``config.json``)."""
    from heron.checkpoint.layout import STATE_FILE
    from heron.checkpoint.reader import open_checkpoint

    folder = Path(path)
    if (folder / STATE_FILE).is_file():
        checkpoint = open_checkpoint(folder)  # one-line CheckpointError if incomplete or corrupt
        return EvalTarget(folder, checkpoint.rollout_id, checkpoint.run_state().policy_version)
    if (folder / "config.json").is_file():
        return EvalTarget(folder)
    raise ConfigError(f"--checkpoint {path} is neither a heron checkpoint (no {STATE_FILE}) nor an HF model folder "
                      f"(no config.json); give a rollout-NNNNNN folder or an exported HF folder")


def check_output_folder(cfg: HeronConfig) -> None:
    """run.dir must not be a training run's folder (see the module doc)."""
    from heron.checkpoint.layout import committed

    run_dir = Path(cfg.run.dir)
    found = [str(run_dir / "metrics.jsonl")] if (run_dir / "metrics.jsonl").exists() else []
    found += [str(p) for p in committed(Path(cfg.checkpoint.folder(cfg.run.dir)))[:1]]
    if found:
        raise ConfigError(f"run.dir {run_dir} holds a training run ({found[0]}); heron eval writes its eval.jsonl "
                          f"into a folder of its own: set run.dir=<new folder>")


def evaluate_checkpoint(cfg: HeronConfig, checkpoint: str) -> EvalRecord:
    """Evaluates ``checkpoint`` on ``cfg``'s eval sets and appends the record to run.dir/eval.jsonl."""
    from heron.folder_lock import FolderLock
    from heron.preflight.writable import check_writable

    from heron.preflight.checks import check_eval_inputs

    run_dir = Path(cfg.run.dir)
    check_eval_inputs(cfg)
    target = resolve_target(checkpoint)
    check_output_folder(cfg)
    check_writable(run_dir, "run.dir")
    with ExitStack() as stack:
        stack.enter_context(FolderLock(run_dir, "run.dir"))  # one writer per folder, as for a training run
        model_path = target.path
        if target.is_checkpoint:
            model_path = Path(tempfile.mkdtemp(prefix=".eval-model-", dir=run_dir))
            stack.callback(shutil.rmtree, model_path, True)
            _export(target.path, model_path)
        metrics = _run_eval(cfg, str(model_path))
        record = EvalRecord(str(target.path), target.rollout_id, target.policy_version, metrics)
        _append(run_dir / "eval.jsonl", record)
    return record


def _export(checkpoint: Path, folder: Path) -> None:
    from heron.checkpoint.export import export_checkpoint

    folder.rmdir()  # export_checkpoint takes an empty folder and publishes the model there atomically
    export_checkpoint(checkpoint, folder)


def _run_eval(cfg: HeronConfig, model_path: str) -> dict[str, float]:
    from heron.evaluator import build_eval_suite
    from heron.preflight import preflight_eval
    from heron.reward.scorer import RewardScorer
    from heron.rollout.registry import EngineSpec, build_engine

    report = preflight_eval(cfg, model_path)
    scorer = RewardScorer(report.hooks.reward_fn, cfg.reward, report.hooks.reward_scope,
                          max_response_tokens=cfg.rollout.max_new_tokens)
    eval_sets = {name: dataset.prompts for name, dataset in report.eval_sets.items()}
    suite = build_eval_suite(cfg.eval, cfg.run.seed, eval_sets, report.formatter, scorer)
    spec = EngineSpec(engine=cfg.engine, model=replace(cfg.model, path=model_path), rollout=cfg.rollout,
                      pad_token_id=report.model.tokenizer.pad_token_id, seed=cfg.run.seed, run_dir=cfg.run.dir)
    engine = build_engine(spec)
    try:
        return suite.evaluate(engine)
    finally:
        scorer.close()
        engine.close()


def _append(path: Path, record: EvalRecord) -> None:
    from heron.tracking.metrics_file import JsonlWriter

    writer = JsonlWriter(path)  # append-only: earlier records are never rewritten
    try:
        writer.write(record.to_json())
    finally:
        writer.close()


def summary(record: EvalRecord, run_dir: str) -> str:
    shown = ", ".join(f"{k[5:]}={v:.3f}" for k, v in record.metrics.items() if k.endswith("accuracy") or "@" in k)
    return f"eval of {record.checkpoint}: {shown} -> {Path(run_dir) / 'eval.jsonl'}"
