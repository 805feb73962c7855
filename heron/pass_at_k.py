"""pass@k and mean@k of sampled eval answers (``eval.samples``).

pass@k, the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
Code", eq. 1): with n samples per prompt of which c are correct,

    pass@k = E_prompts[ 1 - C(n - c, k) / C(n, k) ]

the probability that at least one of k samples drawn without replacement from the n is correct.
Drawing exactly k samples and asking "any correct?" has the same mean but a larger variance;
the estimator uses all n. The binomials overflow floats for moderate n, so the ratio is taken as
the product (their numerically stable form)

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)      (and 0 when n - c < k)

mean@k is the mean reward over all n samples (avg@k: for 0/1 rewards it equals pass@1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k of one prompt with ``c`` correct among ``n`` samples (1 <= k <= n, 0 <= c <= n)."""
    if not (1 <= k <= n and 0 <= c <= n):
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def reported_ks(n: int) -> list[int]:
    """The k values logged for n samples per prompt: 1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def sampled_metrics(rewards: Sequence[Sequence[float]], threshold: float, prefix: str) -> dict[str, float]:
    """``<prefix>pass@k`` for each of ``reported_ks(n)`` and ``<prefix>mean@n``, averaged over
    prompts; ``rewards[p]`` holds prompt p's n sample rewards, correct when ``>= threshold``."""
    n = len(rewards[0])
    assert n > 0 and all(len(r) == n for r in rewards), "every prompt needs the same number of samples"
    correct = [sum(r >= threshold for r in row) for row in rewards]
    metrics = {f"{prefix}pass@{k}": sum(pass_at_k(n, c, k) for c in correct) / len(correct) for k in reported_ks(n)}
    metrics[f"{prefix}mean@{n}"] = sum(sum(row) for row in rewards) / (n * len(rewards))
    return metrics
