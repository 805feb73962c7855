"""The toy task: integer addition, written as ``"23+58="`` -> ``"81"``.

Why addition: the answer is verifiable exactly, a 1-5 M parameter transformer can learn it on
a CPU in minutes, and difficulty is a dial (number of digits, carries), so RL has room to
improve a briefly supervised model.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from heron.records import Prompt


def make_problem(rng: random.Random, max_digits: int) -> tuple[str, str]:
    a = rng.randrange(10 ** rng.randint(1, max_digits))
    b = rng.randrange(10 ** rng.randint(1, max_digits))
    return f"{a}+{b}=", str(a + b)


def make_prompts(num: int, seed: int, max_digits: int, start_id: int = 0) -> list[Prompt]:
    rng = random.Random(seed)
    prompts = []
    for i in range(num):
        text, label = make_problem(rng, max_digits)
        prompts.append(Prompt(prompt_id=start_id + i, text=text, label=label))
    return prompts


def write_jsonl(prompts: list[Prompt], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p.text, "label": p.label}) + "\n")


def write_splits(folder: Path, seed: int, max_digits: int, num_train: int, num_test: int) -> dict[str, Path]:
    """Writes ``train.jsonl`` and ``test.jsonl`` with disjoint problems; returns their paths."""
    train = make_prompts(num_train, seed, max_digits)
    seen = {p.text for p in train}
    rng_seed = seed + 1
    test: list[Prompt] = []
    while len(test) < num_test:
        for p in make_prompts(num_test * 2, rng_seed, max_digits):
            if p.text not in seen and len(test) < num_test:
                seen.add(p.text)
                test.append(Prompt(prompt_id=len(test), text=p.text, label=p.label))
        rng_seed += 1
    paths = {"train": folder / "train.jsonl", "test": folder / "test.jsonl"}
    write_jsonl(train, paths["train"])
    write_jsonl(test, paths["test"])
    return paths
