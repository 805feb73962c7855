"""The one builder of a run: reads the run's config and hands each component only its own
sections (``EngineSpec``, ``TrainerSpec``, ``ResidencySettings``, ...). Nothing below this
module sees the whole ``HeronConfig``; rank and engine actors receive only their specs.

Order: the pre-flight (``heron.preflight``: hooks, paths, writable folders, model folder, data
and prompt lengths; user errors fail in seconds, before anything heavy), then the executor with the engine and the trainer (where they run decides
nothing else), their residency, and the stages that use them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from heron.algo.catalog import ADVANTAGES
from heron.cluster.executor import Executor, LocalExecutor
from heron.components import Components
from heron.critic.build import CriticSpec
from heron.config.residency import resolve_offload
from heron.config.root import HeronConfig
from heron.data.source import PromptDataSource
from heron.evaluator import build_eval_suite
from heron.plugins.hooks import DataSource
from heron.preflight import PreflightReport, preflight
from heron.residency.wiring import ResidencySettings
from heron.reward.scorer import RewardScorer
from heron.rollout.batch_filler import BatchFiller
from heron.rollout.generator import RolloutGenerator
from heron.rollout.registry import EngineSpec
from heron.trainer.build import TrainerSpec


def engine_spec(cfg: HeronConfig, pad_token_id: int) -> EngineSpec:
    _, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    return EngineSpec(
        engine=cfg.engine, model=cfg.model, rollout=cfg.rollout, pad_token_id=pad_token_id,
        seed=cfg.run.seed, run_dir=cfg.run.dir, offload=offload_rollout, device=device_kind(cfg),
        allow_emulated_bf16=cfg.run.allow_emulated_bf16,
    )


def trainer_spec(cfg: HeronConfig) -> TrainerSpec:
    return TrainerSpec(
        model=cfg.model, train=cfg.train, algo=cfg.algo, policy_loss=cfg.hooks.policy_loss,
        total_steps=cfg.rollout.num_rollouts * cfg.train.steps_per_rollout,
        temperature=cfg.rollout.temperature, max_response_tokens=cfg.rollout.max_new_tokens, seed=cfg.run.seed,
        device=device_kind(cfg), allow_emulated_bf16=cfg.run.allow_emulated_bf16,
    )


def device_kind(cfg: HeronConfig) -> str:
    """The components' device kind: ``run.device`` in this process, ``cluster.device`` on Ray
    (resolved by ``heron.device`` inside each actor, where the GPU Ray gave it is visible)."""
    return cfg.cluster.device if cfg.cluster.backend == "ray" else cfg.run.device


def critic_spec(cfg: HeronConfig) -> CriticSpec | None:
    """The critic's spec when the algorithm learns a value model (``algo.advantage=gae``), else None."""
    if not ADVANTAGES[cfg.algo.advantage].needs_critic:
        return None
    return CriticSpec(critic=cfg.critic, model=cfg.model, train=cfg.train, seed=cfg.run.seed, device=device_kind(cfg),
                      total_steps=cfg.rollout.num_rollouts * cfg.train.steps_per_rollout,
                      allow_emulated_bf16=cfg.run.allow_emulated_bf16)


def residency_settings(cfg: HeronConfig) -> ResidencySettings:
    offload_train, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    return ResidencySettings(cfg.colocate, offload_train, offload_rollout, cfg.offload.wait_timeout_s)


def build_executor(cfg: HeronConfig) -> Executor:
    """``cluster.backend``: this process, or Ray actors (``heron.cluster.ray_executor``)."""
    if cfg.cluster.backend != "ray":
        return LocalExecutor(residency_settings(cfg))
    from heron.cluster.ray_executor import RayExecutor, RaySettings

    weight_dir = cfg.cluster.weight_dir or str(Path(cfg.run.dir).resolve() / "weights")
    settings = RaySettings(cfg.cluster, cfg.train, cfg.colocate, residency_settings(cfg), weight_dir,
                           critic=critic_spec(cfg) is not None)
    return RayExecutor(settings)


def build_components(cfg: HeronConfig, report: PreflightReport | None = None) -> Components:
    """``report``: the pre-flight's result if the caller ran it already (``RLRun`` does, before it
    locks ``run.dir``); else it runs here, before anything heavy."""
    report = report or preflight(cfg)
    hooks, tokenizer, formatter = report.hooks, report.model.tokenizer, report.formatter
    if hooks.data_source is not None:
        data_source = hooks.data_source(cfg.data, cfg.run.seed)
    else:
        data_source = PromptDataSource(cfg.data, cfg.run.seed, dataset=report.train_data)
    eval_sets = {name: dataset.prompts for name, dataset in report.eval_sets.items()}
    torch.manual_seed(cfg.run.seed)
    scorer = RewardScorer(hooks.reward_fn, cfg.reward, hooks.reward_scope, max_response_tokens=cfg.rollout.max_new_tokens)
    executor = build_executor(cfg)  # local: this process; ray: actors (heron.cluster)
    engine = None
    try:
        engine = executor.engine(engine_spec(cfg, tokenizer.pad_token_id))
        trainer = executor.trainer(trainer_spec(cfg))
        residency = executor.residency(trainer, engine)  # local: in-process; ray: per actor + driver proxies
        spec = critic_spec(cfg)
        critic = executor.critic(spec, residency) if spec is not None else None  # same residency rules as the trainer
    except BaseException:
        if engine is not None:
            engine.close()  # a server engine stops its server
        executor.close()
        raise
    generator = RolloutGenerator(
        engine, formatter, cfg.rollout, cfg.run.seed, custom=hooks.custom_generate(cfg.hooks), hook_args=cfg.hooks.args
    )
    if cfg.loop.mode == "async":
        data_source, generator = build_async_generation(cfg, data_source, generator)
    return Components(
        cfg=cfg, tokenizer=tokenizer, sampler=data_source, generator=generator, engine=engine,
        scorer=reward_stage(cfg, scorer, generator, data_source),
        trainer=trainer, evaluator=build_eval_suite(cfg.eval, cfg.run.seed, eval_sets, formatter, scorer), hooks=hooks,
        residency=residency, executor=executor, data_metrics=report.data_metrics(), critic=critic,
    )


def reward_stage(
    cfg: HeronConfig, scorer: RewardScorer, generator: RolloutGenerator, data_source: DataSource
) -> RewardScorer | BatchFiller:
    """The run's reward stage: the scorer, or with ``rollout.dynamic_sampling`` the scorer inside
    DAPO's ``BatchFiller`` (which generates more groups until the batch is informative)."""
    if not cfg.rollout.dynamic_sampling.enabled:
        return scorer
    return BatchFiller(scorer, generator, data_source, cfg.rollout.dynamic_sampling, cfg.run.seed, cfg.hooks.data_source)


def build_async_generation(cfg: HeronConfig, data_source: DataSource, generator: RolloutGenerator):
    """``loop.mode: async``: the data source looks ahead and rollout k+1 is generated during train(k)."""
    from heron.data.lookahead import LookaheadSampler
    from heron.rollout.async_generator import AsyncRolloutGenerator

    lookahead = LookaheadSampler(data_source)
    return lookahead, AsyncRolloutGenerator(
        generator, lookahead, batch_size=cfg.rollout.batch_size, num_rollouts=cfg.rollout.num_rollouts,
        max_staleness=cfg.loop.max_staleness, log_path=Path(cfg.run.dir) / "staleness.jsonl",
    )
