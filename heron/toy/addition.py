"""The toy task: integer addition, written as ``"23+58="`` -> ``"81"``.

Why addition: the answer is verifiable exactly, a sub-million parameter transformer learns it
on a CPU in a minute, and difficulty is a dial (number of digits, carries).

The SFT split imitates a sloppy teacher: a fraction of its answers carry a trailing period
(``"81."``), which the exact-match reward rejects. The warm-started model therefore answers
greedily in the teacher's majority style and scores ~0, while some of its samples are bare
answers: RL has to find and reinforce the format the verifiable reward demands, on top of
the arithmetic. (Measured on this tiny model: without the format gap, RL does not raise
held-out accuracy above the SFT model's; see the issue notes.)
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


def teacher_style(prompts: list[Prompt], seed: int, trailing_fraction: float, copies: int = 4) -> list[Prompt]:
    """The SFT rows: ``copies`` of each problem, each answer with a trailing period with
    probability ``trailing_fraction`` (independently, so the style is not a per-problem fact)."""
    rng = random.Random(seed)
    return [
        Prompt(len(prompts) * c + p.prompt_id, p.text, p.label + ("." if rng.random() < trailing_fraction else ""))
        for c in range(copies)
        for p in prompts
    ]


def write_splits(
    folder: Path, seed: int, max_digits: int, num_train: int, num_test: int, trailing_fraction: float = 0.7
) -> dict[str, Path]:
    """Writes ``train.jsonl`` (RL prompts), ``test.jsonl`` (held-out, disjoint problems) and
    ``sft.jsonl`` (the train problems with teacher-style labels); returns their paths."""
    train = make_prompts(num_train, seed, max_digits)
    seen = {p.text for p in train}
    rng_seed = seed + 1
    test: list[Prompt] = []
    while len(test) < num_test:
        if rng_seed > seed + 1000:
            raise ValueError(f"cannot find {num_test} test problems disjoint from train with max_digits={max_digits}")
        for p in make_prompts(num_test * 2, rng_seed, max_digits):
            if p.text not in seen and len(test) < num_test:
                seen.add(p.text)
                test.append(Prompt(prompt_id=len(test), text=p.text, label=p.label))
        rng_seed += 1
    paths = {"train": folder / "train.jsonl", "test": folder / "test.jsonl", "sft": folder / "sft.jsonl"}
    write_jsonl(train, paths["train"])
    write_jsonl(test, paths["test"])
    write_jsonl(teacher_style(train, seed + 2, trailing_fraction), paths["sft"])
    return paths
