"""The pre-flight: every check a command can make before it loads a model or starts a worker.

``heron train`` (through ``build_components``) and ``heron check`` run the same
``preflight(cfg)``, so ``check`` says "ok" exactly when ``train`` would get past its start-up;
``heron sft`` runs ``preflight_sft(cfg)``, the subset it needs, and ``heron eval``
``preflight_eval(cfg, model)`` (``check_eval_inputs`` before the checkpoint is exported). In
order, each raising the first ``UserError`` it finds (one line; the CLI exits 2):

1. the config (already validated when it was loaded), the hooks it names (loaded, signatures
   checked) and the optional packages its features need (heron.preflight.extras);
2. the input paths exist (model folder, data, eval sets);
3. ``run.dir`` and the checkpoint folder are writable (heron.preflight.writable), before the
   model loads rather than at the first save;
4. the model folder: config, weights, tokenizer (heron.preflight.model_folder), that
   ``data.max_prompt_tokens`` + ``rollout.max_new_tokens`` (and ``eval.max_new_tokens``) fit its
   ``max_position_embeddings``, before any data is read, that ``model.lora.target_modules``
   names its linear layers (heron.preflight.lora_targets), that the model supports
   ``train.gradient_checkpointing`` (heron.preflight.activation_checkpointing), and the critic's folder
   (``critic.path``: an HF folder with the policy's vocabulary; heron.preflight.critic_folder);
5. the data: rows parse, no empty prompts, ``rollout.stop`` entries are single tokens, no
   prompt is over ``data.max_prompt_tokens`` and every prompt plus ``rollout.max_new_tokens``
   fits the model's positions (heron.data.prompt_lengths);
6. the eval sets, the same way with ``eval.max_new_tokens``.

The datasets it loads are handed to the run (``PreflightReport``), so they are read and
length-checked once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from heron.cluster.placement import check_local_ray_placeable
from heron.preflight.device import check_device
from heron.config.base import ConfigError
from heron.config.data import DataConfig
from heron.config.root import HeronConfig
from heron.data.dataset import PromptDataset, load_dataset
from heron.data.metrics import data_metrics
from heron.data.prompt_lengths import TokenBudget, check_prompt_lengths
from heron.plugins.run_hooks import RunHooks, load_run_hooks
from heron.preflight.activation_checkpointing import check_activation_checkpointing
from heron.preflight.compile import check_compile
from heron.preflight.critic_folder import check_critic_folder
from heron.preflight.extras import check_extras
from heron.preflight.lora_targets import check_lora_targets
from heron.preflight.model_folder import ModelFolder, inspect_model_folder, require_config_file
from heron.preflight.writable import check_writable
from heron.rollout.prompt_format import PromptFormatter
from heron.rollout.registry import ENGINE_BUILDERS, check_engine_inputs

log = logging.getLogger("heron.preflight")


@dataclass
class PreflightReport:
    """What the pre-flight checked and loaded, for the run to use (and ``heron check`` to print)."""

    hooks: RunHooks
    model: ModelFolder
    formatter: PromptFormatter
    train_data: PromptDataset | None  # None when hooks.data_source supplies the prompts
    eval_sets: dict[str, PromptDataset] = field(default_factory=dict)  # name -> set ("" = eval.path)
    lines: list[str] = field(default_factory=list)  # one per check, for `heron check`

    def data_metrics(self) -> dict[str, float]:
        """Bad rows skipped and long prompts dropped, per dataset (heron.data.metrics)."""
        return data_metrics(self.train_data, self.eval_sets)


def preflight(cfg: HeronConfig) -> PreflightReport:
    """The checks of ``heron train`` before anything heavy (see the module doc)."""
    hooks = load_run_hooks(cfg.hooks, cfg.reward)
    check_extras(cfg)  # the optional packages the chosen features need (heron.extras)
    device_line = check_device(cfg)  # cuda asked for where there is none (heron.preflight.device)
    _check_engine(cfg)
    _check_inputs_exist(cfg)
    check_writable(cfg.run.dir, "run.dir")
    if cfg.checkpoint.enabled:
        check_writable(cfg.checkpoint.folder(cfg.run.dir), "checkpoint.dir")
    data = _DataCheck(inspect_model_folder(cfg.model.path), cfg.data)
    train_budget = data.budget(cfg.rollout.max_new_tokens, "rollout.max_new_tokens")
    eval_budget = data.budget(cfg.eval.max_new_tokens, "eval.max_new_tokens")
    for budget in [train_budget] + ([eval_budget] if cfg.eval.enabled else []):
        budget.check_fits()  # max_prompt_tokens + max_new_tokens <= max_position_embeddings, before data loads
    check_lora_targets(cfg.model)  # model.lora.target_modules are linear layers of this model
    check_activation_checkpointing(cfg.train, cfg.model)  # train.gradient_checkpointing: the model supports it
    check_critic_folder(cfg)  # critic.path, with algo.advantage=gae
    compile_line = check_compile(cfg)  # train.compile: decoder-layer lists to compile, and inductor's toolchain
    data.formatter.stop_token_ids(cfg.rollout.stop)
    report = PreflightReport(hooks, data.model, data.formatter, None, lines=data.lines)
    if hooks.data_source is None:
        report.train_data = data.check(load_dataset(cfg.data.path, cfg.data), train_budget)
    else:
        data.lines.append(f"data: from hooks.data_source {cfg.hooks.data_source!r} (not checked here)")
    if cfg.eval.enabled:
        for name, path in cfg.eval.named_paths.items():
            report.eval_sets[name] = data.check(load_dataset(path, cfg.data), eval_budget)
    if cfg.cluster.backend == "ray":  # a local Ray's size is known from the config (a joined one's later)
        check_local_ray_placeable(cfg.cluster, cfg.train.world_size, cfg.colocate)
    folders = [cfg.run.dir] + ([cfg.checkpoint.folder(cfg.run.dir)] if cfg.checkpoint.enabled else [])
    data.lines.append(f"writable: {', '.join(folders)}")
    data.lines.append(device_line)
    if compile_line is not None:
        data.lines.append(compile_line)
    return report


def preflight_sft(cfg: HeronConfig, output: Path) -> tuple[ModelFolder, PromptFormatter, PromptDataset]:
    """The checks of ``heron sft``: examples, an unused writable ``output``, the model folder,
    and prompt + the longest label + eos within the model's positions."""
    path = cfg.sft.path or cfg.data.path
    if not path:
        raise ConfigError("heron sft needs supervised examples: set sft.path or data.path")
    _check_exists("sft.path" if cfg.sft.path else "data.path", path)
    if output.exists():  # never overwrite a model someone saved
        raise ConfigError(f"sft output '{output}' already exists; set sft.output=<new folder> or remove it")
    check_writable(output, "sft.output")
    data = _DataCheck(inspect_model_folder(cfg.model.path), cfg.data)
    dataset = load_dataset(path, cfg.data)
    answer_tokens = max(len(ids) for ids in data.formatter.tokenize([p.label for p in dataset.prompts])) + 1
    return data.model, data.formatter, data.check(dataset, data.budget(answer_tokens, "the longest label + eos"))


def check_eval_inputs(cfg: HeronConfig) -> RunHooks:
    """What ``heron eval`` checks before it reads a model: eval sets named and present, hooks,
    extras, engine."""
    if not cfg.eval.named_paths:
        raise ConfigError("heron eval needs an eval set: set eval.path=<file> or eval.sets.<name>=<file>")
    hooks = load_run_hooks(cfg.hooks, cfg.reward)
    check_extras(cfg)
    _check_engine(cfg)
    for name, path in cfg.eval.named_paths.items():
        _check_exists(f"eval.sets.{name}" if name else "eval.path", path)
    return hooks


def preflight_eval(cfg: HeronConfig, model_path: str) -> PreflightReport:
    """The checks of ``heron eval`` on the model folder ``model_path`` (the checkpoint's export,
    or an HF folder): ``check_eval_inputs``, then the eval sets' rows and prompt lengths."""
    hooks = check_eval_inputs(cfg)
    data = _DataCheck(inspect_model_folder(model_path), cfg.data)
    eval_budget = data.budget(cfg.eval.max_new_tokens, "eval.max_new_tokens")
    eval_budget.check_fits()  # max_prompt_tokens + max_new_tokens <= max_position_embeddings, before data loads
    report = PreflightReport(hooks, data.model, data.formatter, None, lines=data.lines)
    for name, path in cfg.eval.named_paths.items():
        report.eval_sets[name] = data.check(load_dataset(path, cfg.data), eval_budget)
    return report


def _check_engine(cfg: HeronConfig) -> None:
    """A registered ``engine.kind``, and that backend's own inputs (``ENGINE_CHECKS``: the vLLM venv)."""
    if cfg.engine.kind not in ENGINE_BUILDERS:
        raise ConfigError(f"engine.kind={cfg.engine.kind!r} is not a registered engine; use one of {', '.join(sorted(ENGINE_BUILDERS))}")
    check_engine_inputs(cfg.engine, cfg.model)


def _check_inputs_exist(cfg: HeronConfig) -> None:
    require_config_file(cfg.model.path)
    paths = [("data.path", cfg.data.path)] + [(f"eval.sets.{k}" if k else "eval.path", v) for k, v in cfg.eval.named_paths.items()]
    for key, path in paths:
        if path:
            _check_exists(key, path)


def _check_exists(key: str, path: str) -> None:
    if not Path(path).exists():
        raise ConfigError(f"{key} '{path}' does not exist")


class _DataCheck:
    """Checks datasets against one model folder, noting one line per dataset."""

    def __init__(self, model: ModelFolder, cfg: DataConfig):
        self.model = model
        self.cfg = cfg
        self.formatter = PromptFormatter(model.tokenizer, cfg.apply_chat_template, cfg.system_prompt)
        positions = f"{model.max_positions} positions" if model.max_positions else "no max_position_embeddings"
        self.lines = [f"model: {model.path} ({model.model_type}, {positions}, vocabulary {len(model.tokenizer)})"]

    def budget(self, new_tokens: int, key: str) -> TokenBudget:
        return TokenBudget(self.model.max_positions, new_tokens, key, self.cfg.max_prompt_tokens)

    def check(self, dataset: PromptDataset, budget: TokenBudget) -> PromptDataset:
        """``dataset`` without the prompts that do not fit (``data.on_bad_row=skip``,
        ``data.on_long_prompt=drop``), or a ``DataError``."""
        if budget.limit is None:
            log.warning("model.path %s has no max_position_embeddings: prompt lengths are not checked", self.model.path)
            self.lines.append(f"data: {dataset.path}: {len(dataset.prompts)} prompts (lengths not checked)")
            return dataset
        checked = check_prompt_lengths(dataset, self.formatter, budget, self.cfg.on_bad_row, self.cfg.on_long_prompt).dataset
        fit = f"{budget.max_positions} positions with {budget.new_tokens_key}={budget.max_new_tokens}" if budget.max_positions else ""
        cap = f"data.max_prompt_tokens={budget.max_prompt_tokens}" if budget.max_prompt_tokens else ""
        skipped, dropped = len(checked.bad_rows), len(checked.long_prompts)
        self.lines.append(
            f"data: {dataset.path}: {len(checked.prompts)} prompts fit {' and '.join(x for x in (cap, fit) if x)}"
            + (f"; {skipped} bad rows skipped" if skipped else "")
            + (f"; {dropped} long prompts dropped" if dropped else "")
        )
        return checked
