"""DAPO's overlong reward shaping (Yu et al. 2025, arXiv 2503.14476, eq. 13).

A response cut at the length limit is usually unfinished, and its reward (0 for a missing
answer) punishes reasoning that was merely long. DAPO adds a soft length penalty that starts
a buffer of L_cache tokens before the limit L_max:

    R_length(y) = 0                                  if |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                = -1                                 if |y| > L_max

scaled by a factor (``reward.overlong_penalty``, DAPO: 1). heron's L_max is
``rollout.max_new_tokens`` (a response never exceeds it, so the last case is only reached
at the limit) and |y| the response's token count. Applied to training rewards only; eval
accuracy is the plain reward.
"""

from __future__ import annotations


def overlong_penalty(length: int, max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """factor * R_length(y) <= 0 for a response of ``length`` tokens (module docstring)."""
    if buffer <= 0 or length <= max_tokens - buffer:
        return 0.0
    if length > max_tokens:
        return -factor
    return factor * ((max_tokens - buffer) - length) / buffer
