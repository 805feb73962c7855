"""``heron`` command line. The surface is small and frozen by a test: new knobs go into
component configs (``key.sub=value`` overrides), not new flags."""

from __future__ import annotations

import argparse
import faulthandler
import io
import sys
import time
from pathlib import Path

from heron.config.base import ConfigError
from heron.errors import ComponentError, RunError, UserError, describe_os_error
from heron.interrupt import RunInterrupted
from heron.version import heron_version


def _add_config_args(p: argparse.ArgumentParser) -> None:
    from heron.config.reference import sections_help
    from heron.config.root import HeronConfig

    p.add_argument("--config", help="YAML config file")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides (every key: heron config)")
    p.formatter_class, p.epilog = argparse.RawDescriptionHelpFormatter, sections_help(HeronConfig)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="heron", description="RL post-training for LLMs")
    parser.add_argument("--version", action="version", version=f"heron {heron_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config_args(sub.add_parser("train", help="RL training run"))
    _add_config_args(sub.add_parser("sft", help="supervised warm start; writes an HF folder"))
    _add_config_args(sub.add_parser("check", help="validate a config and its inputs, run nothing"))
    evaluate = sub.add_parser("eval", help="evaluate a checkpoint or HF folder on the eval sets; appends to run.dir/eval.jsonl")
    _add_config_args(evaluate)
    evaluate.add_argument("--checkpoint", required=True, help="a heron checkpoint folder (rollout-NNNNNN) or an HF model folder")
    sub.add_parser("config", help="print every config key with its default and meaning").add_argument(
        "substring", nargs="?", default="", help="only the keys that contain it, e.g. data. or clip"
    )
    toy = sub.add_parser("toy", help="create the toy task data and a random toy model")
    toy.add_argument("--out", required=True, help="folder for data/ and toy-model/")
    demo = sub.add_parser("demo", help="toy model -> SFT warm start -> RL, end to end")
    demo.add_argument("--run-dir", default=None, help="output folder (default runs/demo-<time>)")
    demo.add_argument("--config", default=str(Path(__file__).resolve().parent / "toy" / "demo.yaml"))
    demo.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    _add_ckpt_parser(sub)
    return parser


def _add_ckpt_parser(sub) -> None:
    ckpt = sub.add_parser("ckpt", help="list, inspect and export checkpoints").add_subparsers(dest="action", required=True)
    ckpt.add_parser("list", help="checkpoints in a folder (or a run folder), newest first, verified").add_argument("dir")
    ckpt.add_parser("inspect", help="rollout id, sizes, config and validity of one checkpoint").add_argument("ckpt")
    export = ckpt.add_parser("export-hf", help="write an HF folder (from_pretrained) from a checkpoint")
    export.add_argument("ckpt")
    export.add_argument("out")
    export.add_argument("--adapter", action="store_true", help="a LoRA checkpoint's peft adapter folder instead of the merged model")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _stacks_on_a_native_crash()
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"heron: config error: {e}", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"heron: error: {e}", file=sys.stderr)
        return 2
    except ComponentError as e:  # a dead, hung or unplaceable actor or server (already shut down)
        print(f"heron: cluster error: {e}", file=sys.stderr)
        return 1
    except RunInterrupted as e:  # Ctrl-C / SIGTERM, after the clean-up (heron.interrupt)
        print(f"heron: {e}", file=sys.stderr)
        return e.exit_code
    except RunError as e:  # the machine failed the run (disk full, I/O error): what and what is safe
        print(f"heron: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # any other file the run could not write or read
        where = f": {e.filename}" if e.filename else ""
        print(f"heron: error: {describe_os_error(e)}{where}", file=sys.stderr)
        return 1


def _stacks_on_a_native_crash() -> None:
    """A native crash (a C++ library's ``std::terminate``: "terminate called without an active
    exception", then SIGABRT; a segfault) prints every Python thread's stack before the process
    dies (Python's ``faulthandler``): often the only clue such a crash leaves. Where stderr is no
    file (captured in-process by a test or a notebook) there is nothing to write to: skipped."""
    try:
        faulthandler.enable(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass


def _load(args):
    from heron.config.root import load_config

    return load_config(args.config, args.overrides)


def cmd_train(args) -> int:
    from heron.plugins.run_hooks import load_run_hooks

    cfg = _load(args)
    load_run_hooks(cfg.hooks, cfg.reward)  # a wrong hook fails here, before torch is even imported
    from heron.loop import train

    try:
        train(cfg)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM before the run's exit path took over
        raise _as_run_interrupted(e, cfg) from None
    return 0


def _as_run_interrupted(error: KeyboardInterrupt, cfg) -> RunInterrupted:
    from heron.checkpoint.layout import committed
    from heron.interrupt import interrupt_signal

    if isinstance(error, RunInterrupted):
        return error
    newest = next(iter(committed(Path(cfg.checkpoint.folder(cfg.run.dir)))), None)
    return RunInterrupted(interrupt_signal(error), None, newest)


def cmd_sft(args) -> int:
    from heron.sft import run_sft

    run_sft(_load(args))
    return 0


def cmd_check(args) -> int:
    from heron.preflight import preflight

    cfg = _load(args)
    report = preflight(cfg)  # the same checks as `heron train` before it loads the model
    print(f"config ok: {cfg.rollout.num_rollouts} rollouts x {cfg.rollout.num_samples} samples -> {cfg.run.dir}")
    print("\n".join(report.lines))
    return 0


def cmd_eval(args) -> int:
    from heron.eval_run import evaluate_checkpoint, summary

    cfg = _load(args)
    print(summary(evaluate_checkpoint(cfg, args.checkpoint), cfg.run.dir))
    return 0


def cmd_config(args) -> int:
    from heron.config.reference import config_lines
    from heron.config.root import HeronConfig

    print("\n".join(config_lines(HeronConfig, args.substring)))
    return 0


def cmd_toy(args) -> int:
    from heron.toy.demo_assets import create_demo_assets

    paths = create_demo_assets(Path(args.out))
    print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0


def cmd_demo(args) -> int:
    from heron.toy.demo_assets import run_demo

    run_dir = Path(args.run_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    run_demo(run_dir, args.config, args.overrides)
    return 0


def cmd_ckpt(args) -> int:
    from heron.checkpoint.catalog import inspect_lines, list_lines

    if args.action == "list":
        print("\n".join(list_lines(args.dir)))
    elif args.action == "inspect":  # an invalid checkpoint is a CheckpointError: one line, exit 2
        print("\n".join(inspect_lines(args.ckpt)))
    else:
        from heron.checkpoint.export import export_checkpoint

        print(f"wrote {export_checkpoint(args.ckpt, args.out, adapter=args.adapter)}")
    return 0


COMMANDS = {
    "train": cmd_train, "sft": cmd_sft, "check": cmd_check, "eval": cmd_eval, "config": cmd_config,
    "toy": cmd_toy, "demo": cmd_demo, "ckpt": cmd_ckpt,
}

if __name__ == "__main__":
    sys.exit(main())
