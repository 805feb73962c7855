"""pass@k (Chen et al. 2021) and mean@k against numbers worked out by hand.

Tolerance: ``pass_at_k`` multiplies c factors (1 - k/i), each within 2u of its exact value
(one division, one subtraction; u = 2**-53) and each <= 1, with c multiplications of error u:
the product is within 3cu, and the final 1 - product adds u, so (3c + 1) u bounds the error."""

from fractions import Fraction
from math import comb

import pytest

from heron.pass_at_k import pass_at_k, reported_ks, sampled_metrics

U = 2.0**-53


def bound(c: int) -> float:
    return (3 * c + 1) * U


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 2, 1 - 3 / 10),  # C(3,2)/C(5,2) = 3/10
        (4, 1, 1, 1 / 4),  # pass@1 = c/n
        (10, 3, 5, 1 - 21 / 252),  # C(7,5)/C(10,5) = 21/252 = 1/12
        (4, 0, 2, 0.0),  # nothing correct
        (4, 3, 2, 1.0),  # n - c = 1 < k: every pair holds a correct one
        (3, 3, 3, 1.0),
    ],
)
def test_pass_at_k_hand_worked(n, c, k, expected):
    assert abs(pass_at_k(n, c, k) - expected) <= bound(c) + U


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(2000, 1000) ~ 2e600 overflows a float; the ratio C(1999,1000)/C(2000,1000) = 1000/2000.
    n, k = 2000, 1000
    assert abs(pass_at_k(n, 1, k) - 0.5) <= bound(1)
    for c in (7, 300):  # against exact rational arithmetic
        exact = 1 - Fraction(comb(n - c, k), comb(n, k))
        assert abs(pass_at_k(n, c, k) - float(exact)) <= bound(c) + U


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 1), (4, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_reported_ks():
    assert reported_ks(1) == [1]
    assert reported_ks(4) == [1, 2, 4]
    assert reported_ks(6) == [1, 2, 4, 6]
    assert reported_ks(8) == [1, 2, 4, 8]


def test_sampled_metrics_average_over_prompts():
    # prompt 0: 3 of 4 correct; prompt 1: none.
    metrics = sampled_metrics([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], threshold=1.0, prefix="eval/")
    assert metrics == pytest.approx(
        {"eval/pass@1": (3 / 4 + 0) / 2, "eval/pass@2": (1 + 0) / 2, "eval/pass@4": (1 + 0) / 2, "eval/mean@4": 3 / 8},
        abs=bound(3),
    )


def test_sampled_metrics_threshold_decides_correct_but_mean_uses_rewards():
    metrics = sampled_metrics([[0.5, 1.0]], threshold=1.0, prefix="eval/x/")
    assert metrics == {"eval/x/pass@1": 0.5, "eval/x/pass@2": 1.0, "eval/x/mean@2": 0.75}
