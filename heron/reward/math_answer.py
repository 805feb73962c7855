"""Math answers: extract the final answer of a response and compare it with the label using
math-verify (symbolic and numeric equivalence: ``\\boxed{1/2}``, ``0.5`` and ``\\frac{1}{2}`` agree).

Which part of the response is the answer, first that applies: the last ``\\boxed{...}``
(balanced braces); the text after the last ``####`` (GSM8K style); the text after the last
"answer is" / "answer:"; else math-verify's own extraction over the whole response (the last
LaTeX expression or number it finds).
"""

from __future__ import annotations

import logging
import re

from heron.records import Prompt

# math-verify warns on every call that its SIGALRM timeout is off (we turn it off on purpose)
logging.getLogger("math_verify").setLevel(logging.ERROR)

_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces allowed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: no complete answer


def extract_final_answer(text: str) -> str | None:
    """The marked final answer (boxed, ``####``, "answer is"), or None when nothing marks one."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        return text[matches[-1].end():].strip().rstrip(".").strip()
    return None


def parse_answer(text: str, *, is_label: bool = False) -> list:
    """math-verify's parse of the final answer of ``text`` (empty list: nothing parseable)."""
    from math_verify import parse

    answer = extract_final_answer(text)
    if answer is None and is_label:
        answer = text.strip()
    # timeouts off: math-verify's own timeout uses SIGALRM, which only works on the main
    # thread; the reward scorer enforces reward.timeout_s around the whole call instead.
    if answer is None:
        return parse(text, parsing_timeout=None)
    return parse(answer if "$" in answer else f"${answer}$", parsing_timeout=None)


def math_match(prompt: Prompt, response: str) -> float:
    """1.0 when the response's final answer is mathematically equal to the label; else 0.0."""
    from math_verify import verify

    gold = parse_answer(prompt.label, is_label=True)
    pred = parse_answer(response)
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=None) else 0.0
