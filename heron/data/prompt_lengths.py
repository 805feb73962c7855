"""Prompt lengths against the model's context: every prompt's tokens plus the tokens to
generate (``rollout.max_new_tokens``; ``eval.max_new_tokens`` for eval sets) must fit the
model's ``max_position_embeddings``. A prompt past it is a data error at load (``file:line``),
or is skipped and counted with ``data.on_bad_row=skip``; silently accepted, a 1,202-token
prompt on a 256-position model made a rollout 70 s instead of 3 s.

Speed: tokenizing 100k short prompts takes ~10 s on two busy cores, five times the ~2 s it
takes to read them. Most prompts are far shorter than the context, and for the tokenizers
most models ship, an upper bound on the token count follows from the text's UTF-8 size
alone (``tokens_per_byte``); only prompts whose bound exceeds the budget are tokenized. The
bound is exact reasoning, not a heuristic, and applies only where it can be shown from the
tokenizer's own description; any other tokenizer has every prompt tokenized.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from heron.data.dataset import MAX_LOGGED_BAD_ROWS, PromptDataset
from heron.data.rows import DataError

log = logging.getLogger("heron.data")

# Pre-tokenizers that only split (or drop) text: each token still covers >= 1 byte of it.
_SPLITTING_PRE_TOKENIZERS = {"ByteLevel", "Digits", "Punctuation", "Split", "Whitespace", "WhitespaceSplit"}
# Normalizers and how much they can grow UTF-8 text. NFC composes after a canonical
# decomposition, so it never exceeds NFD, whose per-character growth is at most 3x
# (test_prompt_lengths checks this over every code point with unicodedata).
_NORMALIZER_GROWTH = {None: 1, "NFC": 3}


@dataclass(frozen=True)
class TokenBudget:
    """Positions of the model and the new tokens the checked prompts must leave room for."""

    max_positions: int
    max_new_tokens: int
    new_tokens_key: str  # the config key of max_new_tokens, for the messages

    @property
    def max_prompt_tokens(self) -> int:
        return self.max_positions - self.max_new_tokens


@dataclass(frozen=True)
class LengthCheck:
    """What ``check_prompt_lengths`` did: the dataset without skipped rows, the longest prompt
    (tokens, when any prompt was tokenized) and how many prompts needed the tokenizer."""

    dataset: PromptDataset
    num_tokenized: int
    longest_tokenized: int


def tokens_per_byte(tokenizer: Any) -> tuple[int, int] | None:
    """``(a, b)`` with ``tokens(text) <= a * utf8_bytes(text) + b`` for every text, or None
    when that cannot be shown for this tokenizer.

    Holds for a BPE model (every token merges >= 1 initial symbol; a symbol is one character,
    or one byte under ByteLevel or byte_fallback) behind pre-tokenizers that only split, and a
    normalizer that is absent or NFC (at most 3x growth). ByteLevel's ``add_prefix_space``
    adds one byte. Special tokens in the text each cover >= 1 byte too."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    if (spec.get("model") or {}).get("type") != "BPE":
        return None
    normalizer = spec.get("normalizer")
    growth = _NORMALIZER_GROWTH.get(normalizer["type"] if normalizer else None)
    pre = spec.get("pre_tokenizer")
    parts = [] if pre is None else pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if growth is None or any(p.get("type") not in _SPLITTING_PRE_TOKENIZERS for p in parts):
        return None
    prefix = int(any(p.get("type") == "ByteLevel" and p.get("add_prefix_space") for p in parts))
    return growth, prefix


def check_prompt_lengths(dataset: PromptDataset, formatter: Any, budget: TokenBudget, on_bad_row: str) -> LengthCheck:
    """Checks every prompt of ``dataset`` as the rollout will encode it (``formatter.text``:
    the chat template applied, if configured). ``on_bad_row=error`` raises ``DataError`` at the
    first prompt that does not fit (file order); ``skip`` drops and records them."""
    limit = budget.max_prompt_tokens
    if limit < 1:
        raise DataError(
            f"{budget.new_tokens_key}={budget.max_new_tokens} leaves no room for a prompt in the model's "
            f"{budget.max_positions} positions (max_position_embeddings); lower {budget.new_tokens_key}"
        )
    texts = [formatter.text(p) for p in dataset.prompts]
    bound = tokens_per_byte(formatter.tokenizer)
    if bound is None:
        candidates = list(range(len(texts)))
    else:
        a, b = bound
        candidates = [i for i, t in enumerate(texts) if a * len(t.encode("utf-8")) + b > limit]
    counts = [len(ids) for ids in formatter.tokenize([texts[i] for i in candidates])] if candidates else []
    bad = {i: n for i, n in zip(candidates, counts) if n == 0 or n > limit}
    if bad and on_bad_row == "error":
        first = min(bad)
        raise DataError(f"{_problem(dataset.wheres[first], bad[first], budget)} (or set data.on_bad_row=skip)")
    problems = [_problem(dataset.wheres[i], n, budget) for i, n in sorted(bad.items())]
    for problem in problems[:MAX_LOGGED_BAD_ROWS]:
        log.warning("skipping bad row: %s", problem)
    if problems:
        log.warning("%s: skipped %d prompts of %d that do not fit the model", dataset.path, len(problems), len(texts))
    kept = [i for i in range(len(texts)) if i not in bad]
    checked = replace(
        dataset,
        prompts=[dataset.prompts[i] for i in kept],
        wheres=[dataset.wheres[i] for i in kept],
        bad_rows=dataset.bad_rows + problems,
    )
    if not checked.prompts:
        raise DataError(f"dataset '{dataset.path}' has no prompt that fits the model ({len(checked.bad_rows)} bad rows)")
    return LengthCheck(checked, len(candidates), max(counts, default=0))


def _problem(where: str, num_tokens: int, budget: TokenBudget) -> str:
    if num_tokens == 0:
        return f"{where}: the prompt encodes to no tokens"
    return (
        f"{where}: the prompt is {num_tokens} tokens; with {budget.new_tokens_key}={budget.max_new_tokens} it needs "
        f"{num_tokens + budget.max_new_tokens} positions but the model has {budget.max_positions} "
        f"(max_position_embeddings); shorten it or lower {budget.new_tokens_key}"
    )
