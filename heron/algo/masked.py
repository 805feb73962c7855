"""Reductions over the tokens selected by a mask, optionally weighted.

``mask`` is bool, 0/1, or non-negative per-token weights (``heron.algo.loss_agg``): the
sum is sum_i x_i * m_i. Masked-out positions (m_i = 0) are replaced by 0 with
`torch.where` rather than multiplied by 0, so padding that holds nan or inf never leaks
into the result. A 0/1 mask multiplies kept values by exactly 1. An empty mask gives 0, not nan.
"""

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum_i x_i * m_i over all elements (dim=None) or along `dim`.

    `mask` is bool, 0/1 or non-negative weights, broadcastable to `x`.
    """
    weighted = x if mask.dtype == torch.bool else x * mask.to(x.dtype)
    kept = torch.where(mask.bool(), weighted, torch.zeros((), dtype=x.dtype))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, dim: int | None = None, eps: float = 1e-8
) -> torch.Tensor:
    """sum_i x_i * m_i / max(sum_i m_i, eps); 0 where the mask is empty.

    The count is clamped, not shifted by eps, so non-empty means are exact.
    """
    mask = mask.expand_as(x)
    count = mask.to(x.dtype).sum() if dim is None else mask.to(x.dtype).sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp_min(eps)
