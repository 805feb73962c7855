"""The one builder of a run: reads the run's config and hands each component only its own
sections (``EngineSpec``, ``TrainerSpec``, ``ResidencySettings``, ...). Nothing below this
module sees the whole ``HeronConfig``; rank and engine actors receive only their specs.

Order: inputs are checked and hooks loaded (user code fails in seconds, before anything heavy),
then data, tokenizer, the executor with the engine and the trainer (where they run decides
nothing else), their residency, and the stages that use them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from heron.cluster.executor import Executor, LocalExecutor
from heron.components import Components
from heron.config.base import ConfigError
from heron.config.residency import resolve_offload
from heron.config.root import HeronConfig
from heron.data.dataset import load_prompts
from heron.data.source import PromptDataSource
from heron.evaluator import EvalSuite, Evaluator
from heron.models import load_tokenizer
from heron.plugins.hooks import DataSource
from heron.plugins.run_hooks import load_run_hooks
from heron.residency.wiring import ResidencySettings
from heron.reward.scorer import RewardScorer
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
from heron.rollout.registry import EngineSpec
from heron.trainer.build import TrainerSpec


def check_inputs(cfg: HeronConfig) -> None:
    """Fails fast, before any compute, on missing files and unknown backends (and a backend's
    own inputs: the vLLM venv)."""
    from heron.rollout.registry import ENGINE_BUILDERS, check_engine_inputs

    if cfg.engine.kind not in ENGINE_BUILDERS:
        raise ConfigError(f"engine.kind={cfg.engine.kind!r} is not a registered engine; use one of {', '.join(sorted(ENGINE_BUILDERS))}")
    if not (Path(cfg.model.path) / "config.json").is_file():
        raise ConfigError(f"model.path '{cfg.model.path}' is not an HF model folder (no config.json)")
    paths = [("data.path", cfg.data.path)] + [(f"eval.sets.{k}" if k else "eval.path", v) for k, v in cfg.eval.named_paths.items()]
    for key, path in paths:
        if path and not Path(path).exists():
            raise ConfigError(f"{key} '{path}' does not exist")
    check_engine_inputs(cfg.engine, cfg.model)


def engine_spec(cfg: HeronConfig, pad_token_id: int) -> EngineSpec:
    _, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    return EngineSpec(
        engine=cfg.engine, model=cfg.model, rollout=cfg.rollout, pad_token_id=pad_token_id,
        seed=cfg.run.seed, run_dir=cfg.run.dir, offload=offload_rollout,
    )


def trainer_spec(cfg: HeronConfig) -> TrainerSpec:
    return TrainerSpec(
        model=cfg.model, train=cfg.train, algo=cfg.algo, policy_loss=cfg.hooks.policy_loss,
        total_steps=cfg.rollout.num_rollouts * cfg.train.steps_per_rollout,
        temperature=cfg.rollout.temperature, seed=cfg.run.seed,
    )


def residency_settings(cfg: HeronConfig) -> ResidencySettings:
    offload_train, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    return ResidencySettings(cfg.colocate, offload_train, offload_rollout, cfg.offload.wait_timeout_s)


def build_executor(cfg: HeronConfig) -> Executor:
    """``cluster.backend``: this process, or Ray actors (``heron.cluster.ray_executor``)."""
    if cfg.cluster.backend != "ray":
        return LocalExecutor(residency_settings(cfg))
    from heron.cluster.ray_executor import RayExecutor, RaySettings

    weight_dir = cfg.cluster.weight_dir or str(Path(cfg.run.dir).resolve() / "weights")
    return RayExecutor(RaySettings(cfg.cluster, cfg.train, cfg.colocate, residency_settings(cfg), weight_dir))


def build_components(cfg: HeronConfig) -> Components:
    check_inputs(cfg)
    hooks = load_run_hooks(cfg.hooks, cfg.reward)  # user code is loaded and checked before anything heavy
    data_source = (hooks.data_source or PromptDataSource)(cfg.data, cfg.run.seed)
    eval_sets = {name: load_prompts(path, cfg.data) for name, path in cfg.eval.named_paths.items()} if cfg.eval.enabled else {}
    torch.manual_seed(cfg.run.seed)
    tokenizer = load_tokenizer(cfg.model.path)
    formatter = PromptFormatter(tokenizer, cfg.data.apply_chat_template)
    scorer = RewardScorer(hooks.reward_fn, cfg.reward, hooks.reward_scope)
    executor = build_executor(cfg)  # local: this process; ray: actors (heron.cluster)
    engine = None
    try:
        engine = executor.engine(engine_spec(cfg, tokenizer.pad_token_id))
        trainer = executor.trainer(trainer_spec(cfg))
        residency = executor.residency(trainer, engine)  # local: in-process; ray: per actor + driver proxies
    except BaseException:
        if engine is not None:
            engine.close()  # a server engine stops its server
        executor.close()
        raise
    evaluators = [
        Evaluator(prompts[: cfg.eval.max_prompts or None], formatter, scorer, cfg.eval.max_new_tokens, name=name)
        for name, prompts in eval_sets.items()
    ]
    generator = RolloutGenerator(
        engine, formatter, cfg.rollout, cfg.run.seed, custom=hooks.custom_generate(cfg.hooks), hook_args=cfg.hooks.args
    )
    if cfg.loop.mode == "async":
        data_source, generator = build_async_generation(cfg, data_source, generator)
    return Components(
        cfg=cfg, tokenizer=tokenizer, sampler=data_source, generator=generator, engine=engine, scorer=scorer,
        trainer=trainer, evaluator=EvalSuite(evaluators) if evaluators else None, hooks=hooks,
        residency=residency, executor=executor,
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
