"""How far a vLLM logprob may be from heron's reference for the same weights, derived.

Both sides compute in float32 (unit round-off u = 2^-24) but with different kernels and
summation orders. First-order worst case (Higham, Accuracy and Stability, ch. 3): a dot product
of length K has relative error at most K u, and errors of the ops along the residual stream add
(RMSNorm keeps the activations O(1), so relative errors do not blow up). Per decoder layer the
logits pass through q, k, v, o, gate, up, down, the attention scores and the attention-weighted
sum: 9 ops, plus the LM head. So

    |logit_engine - logit_ref| <= (9 L + 1) K u max|logit|,   K = the longest dot product
    |log p_engine - log p_ref| <= 2 max_v |logit diff| / T      (log_softmax is 2-Lipschitz in sup norm)

On the toy model (L=2, K=384, max|logit| ~3) this is ~3e-3; the differences measured on this
machine are ~1e-6. The bound still catches what the tests look for: a wrong logprob convention
(top-p truncation shifts log p by log of the nucleus mass, ~0.1 at top_p=0.9), temperature
applied wrongly (factor 1/T), or stale weights (differences of order 0.1-1).
"""

from __future__ import annotations

from tests.tolerance import U


def logprob_tolerance(config: dict, max_abs_logit: float, temperature: float = 1.0) -> float:
    layers = config["num_hidden_layers"]
    k = max(config["hidden_size"], config["intermediate_size"], config.get("max_position_embeddings", 0))
    logit_error = (9 * layers + 1) * k * U * max(max_abs_logit, 1.0)
    return 2 * logit_error / temperature
