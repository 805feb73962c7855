"""Builds the components of a run from its config: each gets its own section, nothing global."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.cluster.executor import Executor, build_executor
from heron.config.residency import resolve_offload
from heron.config.root import HeronConfig
from heron.data.source import PromptDataSource
from heron.evaluator import EvalSuite, Evaluator
from heron.plugins.hooks import DataSource
from heron.plugins.run_hooks import RunHooks
from heron.preflight import preflight
from heron.preflight.model_folder import load_tokenizer  # noqa: F401 -- importable from here, as before
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import ResidencySettings, attach_residency
from heron.reward.scorer import RewardScorer
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.engine import RolloutEngine
from heron.rollout.generator import RolloutGenerator
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_model(path: str, dtype: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])


@dataclass
class Components:
    cfg: HeronConfig
    tokenizer: object
    sampler: DataSource  # the data source (hooks.data_source or the built-in PromptDataSource)
    generator: RolloutGenerator
    engine: RolloutEngine
    scorer: RewardScorer
    trainer: PolicyTrainer  # or heron.cluster.trainer_group.TrainerGroup (same verbs)
    evaluator: EvalSuite | None
    hooks: RunHooks
    residency: Coordinator  # sleep/wake of trainer and engine (in-process or per actor); metrics() per rollout
    executor: Executor | None = None  # where engine and trainer run; owns their shutdown

    def advantage_estimator(self):
        return self.hooks.advantage or ADVANTAGE_ESTIMATORS[self.cfg.algo.advantage]

    def close(self) -> None:
        """Stops actors and the Ray session the executor started (no-op locally); idempotent."""
        if hasattr(self.generator, "close"):
            self.generator.close()  # async generation: stop the background thread first
        if self.executor is not None:
            self.executor.close()


def build_components(cfg: HeronConfig) -> Components:
    report = preflight(cfg)  # hooks, folders, model folder, data: every check before anything heavy
    hooks, tokenizer, formatter = report.hooks, report.model.tokenizer, report.formatter
    if hooks.data_source is not None:
        data_source = hooks.data_source(cfg.data, cfg.run.seed)
    else:
        data_source = PromptDataSource(cfg.data, cfg.run.seed, dataset=report.train_data)
    eval_sets = {name: dataset.prompts for name, dataset in report.eval_sets.items()}
    torch.manual_seed(cfg.run.seed)
    scorer = RewardScorer(hooks.reward_fn, cfg.reward, hooks.reward_scope)
    executor = build_executor(cfg)  # local: this process; ray: actors (heron.cluster)
    try:
        engine = executor.engine(tokenizer.pad_token_id)
        trainer = executor.trainer(hooks.policy_loss)
        residency = executor.residency(trainer, engine)  # local: in-process; ray: per actor + driver proxies
    except BaseException:
        executor.close()
        raise
    evaluators = [
        Evaluator(prompts[: cfg.eval.max_prompts or None], formatter, scorer, cfg.eval.max_new_tokens, name=name)
        for name, prompts in eval_sets.items()
    ]
    generator = RolloutGenerator(
        engine, formatter, cfg.rollout, cfg.run.seed, custom=hooks.custom_generate(cfg), hook_args=cfg.hooks.args
    )
    if cfg.loop.mode == "async":
        data_source, generator = build_async_generation(cfg, data_source, generator)
    return Components(
        cfg=cfg,
        tokenizer=tokenizer,
        sampler=data_source,
        generator=generator,
        engine=engine,
        scorer=scorer,
        trainer=trainer,
        evaluator=EvalSuite(evaluators) if evaluators else None,
        hooks=hooks,
        residency=residency,
        executor=executor,
    )


def build_async_generation(cfg: HeronConfig, data_source: DataSource, generator: RolloutGenerator):
    """``loop.mode: async``: the data source looks ahead and rollout k+1 is generated during train(k)."""
    from heron.data.lookahead import LookaheadSampler
    from heron.rollout.async_generator import AsyncRolloutGenerator

    lookahead = LookaheadSampler(data_source)
    return lookahead, AsyncRolloutGenerator(
        generator, lookahead, batch_size=cfg.rollout.batch_size, num_rollouts=cfg.rollout.num_rollouts,
        max_staleness=cfg.loop.max_staleness, log_path=Path(cfg.run.dir) / "staleness.jsonl",
    )


def build_engine(cfg: HeronConfig, pad_token_id: int) -> EmbeddedEngine:
    """The rollout engine (called in this process, or inside an engine actor)."""
    return EmbeddedEngine(
        load_model(cfg.model.path, cfg.model.dtype).eval().requires_grad_(False),
        pad_token_id=pad_token_id,
        max_batch_size=cfg.rollout.max_batch_size,
    )


def build_policy_trainer(cfg: HeronConfig, policy_loss=None, parallelize=None, trainer_cls=PolicyTrainer) -> PolicyTrainer:
    """The policy trainer (in this process, or one rank inside a trainer actor).
    ``policy_loss``: the ``hooks.policy_loss`` hook, if any. ``parallelize(model) -> model``
    applies data parallelism before the optimizer is built."""
    model = load_model(cfg.model.path, cfg.model.dtype)
    objective = PolicyObjective(cfg.algo, policy_loss=policy_loss)
    return trainer_cls(
        parallelize(model) if parallelize else model,
        cfg.train,
        objective,
        total_steps=cfg.rollout.num_rollouts * cfg.train.steps_per_rollout,
        temperature=cfg.rollout.temperature,
        reference=load_model(cfg.model.path, cfg.model.dtype) if objective.needs_reference else None,
    )


def build_residency(cfg: HeronConfig, trainer: PolicyTrainer, engine: EmbeddedEngine) -> Coordinator:
    """Attaches sleep/wake to trainer and engine; offloaded ones rest asleep from here on."""
    offload_train, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    settings = ResidencySettings(cfg.colocate, offload_train, offload_rollout, cfg.offload.wait_timeout_s)
    return attach_residency(trainer, engine, settings)
