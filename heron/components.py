"""Builds the components of a run from its config: each gets its own section, nothing global."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from heron.algo.advantages import ADVANTAGE_ESTIMATORS
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
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
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


@dataclass
class Components:
    cfg: HeronConfig
    tokenizer: object
    sampler: DataSource  # the data source (hooks.data_source or the built-in PromptDataSource)
    generator: RolloutGenerator
    engine: EmbeddedEngine
    scorer: RewardScorer
    trainer: PolicyTrainer
    evaluator: EvalSuite | None
    hooks: RunHooks
    residency: Coordinator  # sleep/wake of trainer and engine (issue 3); metrics() per rollout

    def advantage_estimator(self):
        return self.hooks.advantage or ADVANTAGE_ESTIMATORS[self.cfg.algo.advantage]


def build_components(cfg: HeronConfig) -> Components:
    check_inputs(cfg)
    hooks = load_run_hooks(cfg)  # user code is loaded and checked before anything heavy
    data_source = (hooks.data_source or PromptDataSource)(cfg.data, cfg.run.seed)
    eval_sets = {name: load_prompts(path, cfg.data) for name, path in cfg.eval.named_paths.items()} if cfg.eval.enabled else {}
    torch.manual_seed(cfg.run.seed)
    tokenizer = load_tokenizer(cfg.model.path)
    formatter = PromptFormatter(tokenizer, cfg.data.apply_chat_template)
    scorer = RewardScorer(hooks.reward_fn, cfg.reward, hooks.reward_scope)
    engine = EmbeddedEngine(
        load_model(cfg.model.path, cfg.model.dtype).eval().requires_grad_(False),
        pad_token_id=tokenizer.pad_token_id,
        max_batch_size=cfg.rollout.max_batch_size,
    )
    objective = PolicyObjective(cfg.algo, policy_loss=hooks.policy_loss)
    trainer = PolicyTrainer(
        load_model(cfg.model.path, cfg.model.dtype),
        cfg.train,
        objective,
        total_steps=cfg.rollout.num_rollouts * cfg.train.steps_per_rollout,
        temperature=cfg.rollout.temperature,
        reference=load_model(cfg.model.path, cfg.model.dtype) if objective.needs_reference else None,
    )
    residency = build_residency(cfg, trainer, engine)
    evaluators = [
        Evaluator(prompts[: cfg.eval.max_prompts or None], formatter, scorer, cfg.eval.max_new_tokens, name=name)
        for name, prompts in eval_sets.items()
    ]
    return Components(
        cfg=cfg,
        tokenizer=tokenizer,
        sampler=data_source,
        generator=RolloutGenerator(
            engine, formatter, cfg.rollout, cfg.run.seed, custom=hooks.custom_generate(cfg), hook_args=cfg.hooks.args
        ),
        engine=engine,
        scorer=scorer,
        trainer=trainer,
        evaluator=EvalSuite(evaluators) if evaluators else None,
        hooks=hooks,
        residency=residency,
    )


def build_residency(cfg: HeronConfig, trainer: PolicyTrainer, engine: EmbeddedEngine) -> Coordinator:
    """Attaches sleep/wake to trainer and engine; offloaded ones rest asleep from here on."""
    offload_train, offload_rollout = resolve_offload(cfg.colocate, cfg.offload)
    settings = ResidencySettings(cfg.colocate, offload_train, offload_rollout, cfg.offload.wait_timeout_s)
    return attach_residency(trainer, engine, settings)
