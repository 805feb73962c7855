"""The demo, end to end on a laptop CPU: toy data and model -> SFT warm start -> RL."""

from __future__ import annotations

import time
from pathlib import Path

from heron.toy.addition import make_prompts, write_splits
from heron.toy.model import ToyModelSpec, create_toy_model

MAX_DIGITS = 2


def create_demo_assets(out: Path, seed: int = 0, max_digits: int = MAX_DIGITS, num_train: int = 4000) -> dict[str, Path]:
    """Writes ``data/{train,test}.jsonl`` and ``toy-model/`` under ``out`` (skips what exists)."""
    data = out / "data"
    paths = {"train": data / "train.jsonl", "test": data / "test.jsonl", "sft": data / "sft.jsonl", "model": out / "toy-model"}
    if not paths["sft"].exists():
        write_splits(data, seed=seed, max_digits=max_digits, num_train=num_train, num_test=min(200, num_train // 4))
    if not (paths["model"] / "config.json").exists():
        corpus = [p.text + p.label + "." for p in make_prompts(4000, seed + 7, max_digits)]
        create_toy_model(paths["model"], corpus, ToyModelSpec(seed=seed))
    return paths


def warm_start(run_dir: Path, config_path: str, overrides: list[str]) -> list[str]:
    """The demo's assets under ``run_dir`` and its SFT warm start -> the RL run's overrides
    (``run_dir``, the data, the warm-started model, then ``overrides``)."""
    from heron.config.root import load_config
    from heron.sft import run_sft

    assets = create_demo_assets(run_dir)
    base = [
        f"run.dir={run_dir}", f"data.path={assets['train']}", f"eval.path={assets['test']}", f"sft.path={assets['sft']}"
    ]
    sft_model = run_sft(load_config(config_path, [*base, f"model.path={assets['model']}", *overrides]))
    return [*base, f"model.path={sft_model}", *overrides]


def run_demo(run_dir: Path, config_path: str, overrides: list[str]) -> list[dict]:
    from heron.config.root import load_config
    from heron.loop import train

    start = time.perf_counter()
    records = train(load_config(config_path, warm_start(run_dir, config_path, overrides)))
    print(f"demo: done in {time.perf_counter() - start:.0f}s; metrics in {run_dir}/metrics.jsonl, "
          f"curve in {run_dir}/reward_curve.png")
    return records
