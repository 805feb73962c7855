"""Derived tolerances: how tests compare float results of runs that should agree.

A bound here comes from float32 round-off and the maths of the computation, never from what
one machine measured (another machine of the same kind failed three tests that were tuned
that way). The rules, in order of preference:

1. Same operations in the same order on the same machine (resume, offload round trip, a DCP
   copy, colocated vs disaggregated with one thread per actor): bit-exact, ``torch.equal``.
2. The same sum in another order (other shards, micro-batches, kernels, thread counts):
   ``|S' - S| <= gamma(n) * sum|x_i|`` with ``gamma(n) = n u / (1 - n u)``, ``u = 2**-24``
   (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., sec. 4.2 and 3.5 for dot
   and matrix products). A whole forward + backward is a chain of such sums: ``n`` is the
   length of that chain (``reduction_length``), and norm-wise the error of a result is at
   most ``gamma(n)`` times its norm (no catastrophic cancellation in norm).
3. Parameters after optimizer steps: only if the optimizer maps gradient round-off to update
   round-off. AdamW's update ``m/(sqrt(v) + eps)`` has Lipschitz constant ``<= 2/eps`` in the
   gradient: at the default ``eps = 1e-8`` a 1e-12 gradient difference on an element whose
   gradient is ~0 becomes a full lr-sized step. Tests comparing parameters of runs that differ
   in summation order therefore use ``eps = grad_clip = 1`` (clipping keeps every ``|g_i| <= 1``,
   so the update lies in ``[m/2, m]``: momentum SGD, ``|du| <= 2 |dg|``) and compare the
   *updates* ``theta - theta_0`` norm-wise (``assert_updates_close``), with float32 rounding of
   the parameters themselves added (``steps`` roundings of ``|theta|``, ``u`` each, per run).
4. Discrete outcomes computed from such floats (sampled tokens, clip counts) are compared
   exactly only when the floats agree to round-off: the chance that a perturbation ``delta`` of
   a probability moves one of ``D`` sampling draws across a boundary is ``<= 2 D delta``.
5. Time: no upper wall-clock bound on work; ordering is checked with events, and deadlines
   (``HANG_S``) only catch a hang.
"""

from __future__ import annotations

import math

import torch

U = 2.0**-24  # float32 unit round-off
HANG_S = 600.0  # a deadline that only a hang exceeds, on a machine loaded ~20x (measured: toy runs 20x slower)
# Ray runs in tests: actor start-up (default deadline 120 s) took longer than that on a loaded machine
RAY_START = f"cluster.startup_timeout_s={HANG_S:g}"


def gamma(n: int) -> float:
    """Higham's gamma_n: relative error bound of an n-term float32 sum or dot product."""
    if n * U >= 1:
        raise ValueError(f"gamma({n}) is undefined in float32")
    return n * U / (1 - n * U)


def reduction_length(config, tokens: int) -> int:
    """Upper bound on the length of the chain of float32 sums in one forward + backward of a
    decoder ``config`` (an HF config) over ``tokens`` tokens. Per layer and pass: two RMSNorms,
    the q/k/v, o and gate/up projections (hidden h each), attention scores and weighted values
    (positions P each), the down projection (intermediate i); the backward pass mirrors the
    forward; then the final norm and lm_head (h), the log-softmax (vocabulary V) and the sum
    of every weight gradient over the tokens:  2 L (5h + 2P + i) + 2h + V + tokens."""
    h, i, p = config.hidden_size, config.intermediate_size, config.max_position_embeddings
    return 2 * config.num_hidden_layers * (5 * h + 2 * p + i) + 2 * h + config.vocab_size + tokens


def logprob_roundoff(config, tokens: int, max_abs_logprob: float) -> float:
    """The largest |difference| round-off explains between two computations of the log-probability
    of the same token in another summation order (``assert_logprobs_close``'s bound at its largest
    term): ``2 gamma(n) (max|lp| + log V)``, ``n = reduction_length(config, tokens)``."""
    n = reduction_length(config, tokens)
    return 2 * gamma(n) * (max_abs_logprob + math.log(config.vocab_size))


def max_sampled_surprisal(vocab_size: int, num_draws: int, failure: float = 1e-9) -> float:
    """A bound K on -log p of every token sampled in ``num_draws`` draws (without top-p), exceeded
    with probability at most ``failure``: one draw picks some token of probability below e^-K
    with probability below V e^-K (a union over the vocabulary), so K = log(V num_draws / failure)
    (rule 4). For tests that see a run's metrics but not its samples."""
    return math.log(vocab_size * num_draws / failure)


def flat(tensors: dict[str, torch.Tensor], keys) -> torch.Tensor:
    return torch.cat([tensors[k].detach().double().flatten() for k in keys])


def assert_updates_close(actual, expected, initial, *, n: int, steps: int) -> None:
    """``actual`` and ``expected`` parameter dicts, trained from ``initial`` by ``steps``
    optimizer steps of a Lipschitz optimizer (rule 3), agree:

        ||d_a - d_e|| <= 4 gamma(n) ||d_e|| + 2 steps u ||theta_e||,   d = theta - theta_0

    4 = 2 runs x Lipschitz constant 2; the second term is the rounding of each parameter
    update to float32 in both runs."""
    keys = sorted(expected)
    assert sorted(actual) == keys, set(actual) ^ set(keys)
    theta_e = flat(expected, keys)
    d_e = theta_e - flat(initial, keys)
    d_a = flat(actual, keys) - flat(initial, keys)
    bound = 4 * gamma(n) * d_e.norm() + 2 * steps * U * theta_e.norm()
    diff = (d_a - d_e).norm()
    assert d_e.norm() > 10 * bound, f"the updates ({d_e.norm():.3g}) are too small to compare against {bound:.3g}"
    if diff > bound:
        worst = max(keys, key=lambda k: (actual[k].double() - expected[k].double()).norm())
        raise AssertionError(
            f"||update difference|| {diff:.3g} > derived bound {bound:.3g} (||update|| {d_e.norm():.3g}); "
            f"largest in {worst}: {(actual[worst].double() - expected[worst].double()).norm():.3g}"
        )


def assert_sums_close(actual: float, expected: float, *, n: int, magnitude: float, what: str = "") -> None:
    """Two float32 evaluations of the same sum-like quantity: ``|a - e| <= 2 gamma(n) magnitude``,
    ``magnitude`` the sum of the absolute values of its terms (rule 2)."""
    bound = 2 * gamma(n) * magnitude
    assert abs(actual - expected) <= bound, f"{what}: {actual!r} vs {expected!r}, |diff| {abs(actual - expected):.3g} > {bound:.3g}"


def assert_metrics_close(actual: dict, expected: dict, *, n: int, log_vocab: float) -> None:
    """Per-rollout train metrics (token means of losses, entropy, KL, clip fraction; the grad
    norm; lr) of two runs that differ in summation order (rule 2):

        |a - e| <= 2 gamma(n) (|e| + log V)

    |e| is the magnitude of terms of one sign (entropy, KL, grad norm); log V bounds the
    per-token magnitude of the others (a token's entropy <= log V; |A ratio| <= 1 here) and the
    round-off of a log-probability, which the KL and the ratios are computed from."""
    assert actual.keys() == expected.keys(), set(actual) ^ set(expected)
    for key, value in expected.items():
        assert_sums_close(actual[key], value, n=n, magnitude=abs(value) + log_vocab, what=key)


def assert_logprobs_close(actual, expected, *, n: int, log_vocab: float) -> None:
    """Log-probabilities of the same tokens computed in another summation order (a KV-cached,
    padded or batched forward vs a full one), element by element:
    ``|a - e| <= 2 gamma(n) (|e| + log V)``, log V the scale of the log-sum-exp over the vocabulary."""
    actual, expected = torch.as_tensor(actual).double(), torch.as_tensor(expected).double()
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    bound = 2 * gamma(n) * (expected.abs() + log_vocab)
    excess = (actual - expected).abs() - bound
    assert bool((excess <= 0).all()), (
        f"{int((excess > 0).sum())} of {excess.numel()} log-probabilities beyond 2 gamma({n}) (|e| + log V); "
        f"largest |diff| {(actual - expected).abs().max():.3g}"
    )


U_BF16 = 2.0**-8  # bfloat16 unit round-off (8 significand bits)


def bf16_autocast_stages(config) -> int:
    """bf16-rounded stages of one decoder forward under autocast (an HF ``config``): per layer
    the q, k, v, o, gate, up and down projections and the two attention products (9), then the
    lm_head. Norms, softmaxes and everything after the logits stay float32."""
    return 9 * config.num_hidden_layers + 1


def assert_bf16_logprobs_close(actual, expected, config) -> None:
    """Log-probabilities of a bf16-autocast forward against float32, element by element:

        |a - e| <= 2 (2 u_bf16 S) (|e| + log V),   S = bf16_autocast_stages(config)

    Each stage rounds its two operands to bf16 (relative error <= u_bf16 each, so <= 2 u_bf16 in
    their product; the float32 accumulation adds gamma_h, negligible next to it); as for
    ``assert_logprobs_close`` the norm-wise relative errors of a chain of stages add to first
    order, so the logits carry <= 2 u_bf16 S, and log p = z_y - lse(z) moves by at most twice
    that, on the scale |e| + log V of the log-sum-exp."""
    actual, expected = torch.as_tensor(actual).double(), torch.as_tensor(expected).double()
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    relative = 2 * U_BF16 * bf16_autocast_stages(config)
    bound = 2 * relative * (expected.abs() + math.log(config.vocab_size))
    excess = (actual - expected).abs() - bound
    assert bool((excess <= 0).all()), (
        f"{int((excess > 0).sum())} of {excess.numel()} bf16 log-probabilities beyond 2 (2 u_bf16 S) (|e| + log V); "
        f"largest |diff| {(actual - expected).abs().max():.3g}"
    )
