"""What the pre-flight left out of the data, as run metrics: the count of bad rows skipped
(``data.on_bad_row=skip``: bad JSON, a missing key, a wrong type, an empty prompt) and of
prompts dropped for their length (``data.on_long_prompt=drop``). The counts are fixed for a run
(the datasets are read once, at start-up), and every rollout record carries them, so a
dashboard shows them beside the reward and a run that lost half its data says so.

Keys: ``data/bad_rows`` and ``data/dropped_long_prompts`` for the training data;
``data/eval/...`` for ``eval.path`` and ``data/eval/<name>/...`` for ``eval.sets.<name>``.
"""

from __future__ import annotations

from heron.data.dataset import PromptDataset


def data_metrics(train: PromptDataset | None, eval_sets: dict[str, PromptDataset]) -> dict[str, float]:
    """``train``: None when a ``hooks.data_source`` supplies the prompts (nothing is counted)."""
    metrics: dict[str, float] = {}
    if train is not None:
        metrics.update(_counts("data/", train))
    for name, dataset in eval_sets.items():
        metrics.update(_counts(f"data/eval/{name}/" if name else "data/eval/", dataset))
    return metrics


def _counts(prefix: str, dataset: PromptDataset) -> dict[str, float]:
    return {f"{prefix}bad_rows": float(len(dataset.bad_rows)), f"{prefix}dropped_long_prompts": float(len(dataset.long_prompts))}
