"""Built-in rule-based rewards, all with the per-sample signature ``(prompt, response) -> float``
(the ``reward`` hook point). Each returns 1.0 for a correct answer and 0.0 otherwise."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from heron.records import Prompt
from heron.reward.math_answer import math_match

# a signed integer, decimal or simple fraction, allowing thousands separators: -1,234.5  3/4  .5
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:/\d+)?")


def exact_match(prompt: Prompt, response: str) -> float:
    """1.0 when the response, stripped of surrounding whitespace, equals the label; else 0.0."""
    return 1.0 if response.strip() == prompt.label.strip() else 0.0


def parse_number(text: str) -> float | None:
    """The value of a number written as ``12``, ``-1,234.5``, ``.5`` or ``3/4``; None otherwise."""
    text = text.strip().replace(",", "")
    try:
        return float(Fraction(text)) if "/" in text else float(text)
    except (ValueError, ZeroDivisionError):
        return None


def last_number(text: str) -> str | None:
    found = [m.group(0) for m in _NUMBER.finditer(text) if any(c.isdigit() for c in m.group(0))]
    return found[-1] if found else None


def numeric_match(prompt: Prompt, response: str) -> float:
    """1.0 when the last number in the response equals the numeric label (relative tolerance
    1e-6, so "0.50" matches "1/2" and "1,000" matches "1000"); 0.0 otherwise or if either has no number."""
    gold = parse_number(prompt.label)
    found = last_number(response)
    value = parse_number(found) if found is not None else None
    if gold is None or value is None:
        return 0.0
    return 1.0 if math.isclose(value, gold, rel_tol=1e-6, abs_tol=1e-12) else 0.0


BUILTIN_REWARDS = {"exact_match": exact_match, "numeric_match": numeric_match, "math": math_match}
