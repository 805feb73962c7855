"""Prompt lengths against ``data.max_prompt_tokens`` and the model's context: every prompt's
tokens plus the tokens to generate (``rollout.max_new_tokens``; ``eval.max_new_tokens`` for
eval sets) must fit the model's ``max_position_embeddings``, and no prompt may be longer than
``data.max_prompt_tokens`` when that is set. A prompt past either is a data error at load
(``file:line``), or is dropped and counted with ``data.on_long_prompt=drop``; silently
accepted, a 1,202-token prompt on a 256-position model made a rollout 70 s instead of 3 s.

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
    """How long a prompt may be: ``data.max_prompt_tokens`` when set, and always what the
    model's positions leave after the tokens to generate.

    ``limit = min(max_prompt_tokens or inf, max_positions - max_new_tokens)``; None when
    neither is known (no cap configured and no ``max_position_embeddings``)."""

    max_positions: int | None  # the model's max_position_embeddings; None when its config has none
    max_new_tokens: int
    new_tokens_key: str  # the config key of max_new_tokens, for the messages
    max_prompt_tokens: int = 0  # data.max_prompt_tokens; 0 = no cap beyond the model's context

    @property
    def room(self) -> int | None:
        """Positions left for the prompt after ``max_new_tokens``."""
        return None if self.max_positions is None else self.max_positions - self.max_new_tokens

    @property
    def limit(self) -> int | None:
        caps = [c for c in (self.room, self.max_prompt_tokens or None) if c is not None]
        return min(caps) if caps else None

    def check_room(self) -> None:
        """``DataError`` when ``max_new_tokens`` alone fills the model's positions."""
        if self.room is not None and self.room < 1:
            raise DataError(
                f"{self.new_tokens_key}={self.max_new_tokens} leaves no room for a prompt in the model's "
                f"{self.max_positions} positions (max_position_embeddings); lower {self.new_tokens_key}"
            )

    def check_fits(self) -> None:
        """The start-up check: ``max_prompt_tokens + max_new_tokens <= max_position_embeddings``
        (a configured cap the model cannot hold would pass prompts that overflow its positions)."""
        self.check_room()
        if self.room is not None and self.max_prompt_tokens > self.room:
            raise DataError(
                f"data.max_prompt_tokens={self.max_prompt_tokens} + {self.new_tokens_key}={self.max_new_tokens} = "
                f"{self.max_prompt_tokens + self.max_new_tokens} tokens do not fit the model's {self.max_positions} "
                f"positions (max_position_embeddings in model.path's config.json); set data.max_prompt_tokens<={self.room} "
                f"or lower {self.new_tokens_key}"
            )


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


def check_prompt_lengths(
    dataset: PromptDataset, formatter: Any, budget: TokenBudget, on_bad_row: str, on_long_prompt: str
) -> LengthCheck:
    """Checks every prompt of ``dataset`` as the rollout will encode it (``formatter.text``: the
    chat template and system prompt applied, if configured) against ``budget.limit``.

    A prompt that encodes to no tokens is a bad row (``on_bad_row``: error | skip); one over the
    limit is a long prompt (``on_long_prompt``: error | drop). ``error`` raises ``DataError`` at
    the first such prompt in file order; otherwise the prompt is left out and recorded in
    ``bad_rows`` or ``long_prompts`` (the metrics data/bad_rows, data/dropped_long_prompts)."""
    budget.check_room()
    limit = budget.limit
    texts = [formatter.text(p) for p in dataset.prompts]
    candidates = _candidates(texts, formatter.tokenizer, limit)
    counts = [len(ids) for ids in formatter.tokenize([texts[i] for i in candidates])] if candidates else []
    bad = {i: n for i, n in zip(candidates, counts) if n == 0 or n > limit}
    for i in sorted(bad):
        if (on_bad_row if bad[i] == 0 else on_long_prompt) == "error":
            fix = "data.on_bad_row=skip" if bad[i] == 0 else "data.on_long_prompt=drop"
            raise DataError(f"{_problem(dataset.wheres[i], bad[i], budget)} (or set {fix})")
    empty = [_problem(dataset.wheres[i], 0, budget) for i in sorted(bad) if bad[i] == 0]
    long = sorted(i for i in bad if bad[i] > 0)
    _log_skipped(dataset, empty, long, bad, limit, len(texts))
    kept = [i for i in range(len(texts)) if i not in bad]
    checked = replace(
        dataset,
        prompts=[dataset.prompts[i] for i in kept],
        wheres=[dataset.wheres[i] for i in kept],
        bad_rows=dataset.bad_rows + empty,
        long_prompts=dataset.long_prompts + [_problem(dataset.wheres[i], bad[i], budget) for i in long],
    )
    if not checked.prompts:
        raise DataError(
            f"dataset '{dataset.path}' has no prompt that fits {limit} tokens "
            f"({len(checked.bad_rows)} bad rows, {len(checked.long_prompts)} long prompts)"
        )
    return LengthCheck(checked, len(candidates), max(counts, default=0))


def _candidates(texts: list[str], tokenizer: Any, limit: int) -> list[int]:
    """Indices of the texts that could be over ``limit`` tokens (all, without a byte bound)."""
    bound = tokens_per_byte(tokenizer)
    if bound is None:
        return list(range(len(texts)))
    a, b = bound
    return [i for i, t in enumerate(texts) if a * len(t.encode("utf-8")) + b > limit]


def _log_skipped(dataset: PromptDataset, empty: list[str], long: list[int], counts: dict[int, int], limit: int, total: int) -> None:
    """Bad rows one line each (up to MAX_LOGGED_BAD_ROWS); long prompts in one line, with
    their count and the first one as the example."""
    for problem in empty[:MAX_LOGGED_BAD_ROWS]:
        log.warning("skipping bad row: %s", problem)
    if empty:
        log.warning("%s: skipped %d prompts of %d that encode to no tokens", dataset.path, len(empty), total)
    if long:
        first = long[0]
        log.warning(
            "%s: dropped %d of %d prompts longer than %d tokens (data.on_long_prompt=drop; metric data/dropped_long_prompts), "
            "e.g. prompt_id %d at %s: %d tokens",
            dataset.path, len(long), total, limit, dataset.prompts[first].prompt_id, dataset.wheres[first], counts[first],
        )


def _problem(where: str, num_tokens: int, budget: TokenBudget) -> str:
    if num_tokens == 0:
        return f"{where}: the prompt encodes to no tokens"
    cap = budget.max_prompt_tokens
    if cap and num_tokens > cap:
        return f"{where}: the prompt is {num_tokens} tokens, over data.max_prompt_tokens={cap}; shorten it or raise data.max_prompt_tokens"
    return (
        f"{where}: the prompt is {num_tokens} tokens; with {budget.new_tokens_key}={budget.max_new_tokens} it needs "
        f"{num_tokens + budget.max_new_tokens} positions but the model has {budget.max_positions} "
        f"(max_position_embeddings); shorten it or lower {budget.new_tokens_key}"
    )
