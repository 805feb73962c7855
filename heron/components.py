"""Builds the components of a run from its config: each gets its own section, nothing global."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
from heron.cluster.executor import Executor, build_executor
from heron.config.residency import resolve_offload
from heron.config.root import HeronConfig
from heron.data.dataset import load_prompts
from heron.data.source import PromptDataSource
from heron.evaluator import EvalSuite, Evaluator
from heron.plugins.hooks import DataSource
from heron.plugins.run_hooks import RunHooks, load_run_hooks
from heron.residency.coordinator import Coordinator
from heron.residency.wiring import ResidencySettings, attach_residency
from heron.reward.scorer import RewardScorer
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.engine import RolloutEngine
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
from heron.rollout.vllm.build import build_vllm_engine, vllm_launch  # a server in its own venv; heron never imports vllm
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])


def check_inputs(cfg: HeronConfig) -> None:
    """Fails fast, before any compute, on missing files."""
    from heron.config.base import ConfigError

    if not (Path(cfg.model.path) / "config.json").is_file():
        raise ConfigError(f"model.path '{cfg.model.path}' is not an HF model folder (no config.json)")
    paths = [("data.path", cfg.data.path)] + [(f"eval.sets.{k}" if k else "eval.path", v) for k, v in cfg.eval.named_paths.items()]
    for key, path in paths:
        if path and not Path(path).exists():
            raise ConfigError(f"{key} '{path}' does not exist")
    if cfg.engine.kind == "vllm":
        vllm_launch(cfg)  # the vLLM venv exists, max_model_len fits the model


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
        if hasattr(self.engine, "close"):
            self.engine.close()  # a server engine stops its server (local; on Ray the actor's does)
        if self.executor is not None:
            self.executor.close()


def build_components(cfg: HeronConfig) -> Components:
    check_inputs(cfg)
    hooks = load_run_hooks(cfg)  # user code is loaded and checked before anything heavy
    data_source = (hooks.data_source or PromptDataSource)(cfg.data, cfg.run.seed)
    eval_sets = {name: load_prompts(path, cfg.data) for name, path in cfg.eval.named_paths.items()} if cfg.eval.enabled else {}
    torch.manual_seed(cfg.run.seed)
    tokenizer = load_tokenizer(cfg.model.path)
    formatter = PromptFormatter(tokenizer, cfg.data.apply_chat_template)
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


def build_engine(cfg: HeronConfig, pad_token_id: int, name: str = "engine") -> RolloutEngine:
    """The rollout engine of ``engine.kind`` (called in this process, or inside an engine actor)."""
    return ENGINE_BUILDERS[cfg.engine.kind](cfg, pad_token_id, name)


def build_embedded_engine(cfg: HeronConfig, pad_token_id: int, name: str = "engine") -> EmbeddedEngine:
    return EmbeddedEngine(
        load_model(cfg.model.path, cfg.model.dtype).eval().requires_grad_(False),
        pad_token_id=pad_token_id,
        max_batch_size=cfg.rollout.max_batch_size,
    )


ENGINE_BUILDERS = {"embedded": build_embedded_engine, "vllm": build_vllm_engine}  # engine.kind -> builder


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
