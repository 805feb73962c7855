"""The shared-prompt layout's attention by parts (heron.trainer.grouped_attention) against one
dense-masked SDPA call over the whole packed row (``SharedLayout.dense_mask``: causal, the shared
part and the query's own segment).

Both compute, for every real query, softmax over the same visible keys of the same scores; the
dense call also sums masked keys' exact zeros. In float64 the difference is summation order
only: each output within gamma(k) (sum of |terms|) of the other, with k the most terms any sum
has (the D products of a score, the n keys of a softmax and of the weighted sum). A key seen or
missed by mistake moves an output by O(1). The whole forward (logprobs, entropies, gradients)
against padded rows is tests/unit/test_shared_prompts.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from heron.trainer.grouped_attention import _dispatch, grouped_attention, placeholder_mask
from heron.trainer.model_flops import ForwardCost
from heron.trainer.shared_prompts import plan
from tests.tolerance import gamma

HEADS, KV_HEADS, DIM = 4, 2, 8
TOKENS = ForwardCost(per_token=1.0, per_pair=0.0)


def _batch(seed: int):
    """A right-padded micro-batch: four prompts of 1-9 tokens, the first with one sample, the
    others 2-4, answers of 1-6 tokens -> (input_ids, attention_mask [B, L], prompt_lengths [B])."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for k in range(4):
        prompt = (torch.randint(3, 50, (int(torch.randint(1, 10, (1,), generator=generator)),), generator=generator)
                  + 100 * k).tolist()
        for _ in range(int(torch.randint(2, 5, (1,), generator=generator)) if k else 1):
            answer = torch.randint(3, 50, (int(torch.randint(1, 7, (1,), generator=generator)),), generator=generator)
            rows.append((prompt, answer.tolist()))
    length = max(len(p) + len(a) for p, a in rows)
    input_ids = torch.tensor([p + a + [0] * (length - len(p) - len(a)) for p, a in rows])
    attention_mask = torch.tensor([[1] * (len(p) + len(a)) + [0] * (length - len(p) - len(a)) for p, a in rows])
    return input_ids, attention_mask, torch.tensor([len(p) for p, _ in rows])


def _dense(query, key, value, mask, scale):
    """One SDPA call over the packed rows with the dense mask -> [G, S, H, D]."""
    out = F.scaled_dot_product_attention(query, key.repeat_interleave(HEADS // KV_HEADS, 1),
                                         value.repeat_interleave(HEADS // KV_HEADS, 1), attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


def _bound(query, key, value, mask, scale):
    """Per output [G, S, H, D]: gamma(D + 2 S + 8) x (max |score| terms + 1) x max |v|, a float64
    summation-order bound for either computation against exact attention (doubled for the pair)."""
    width = query.shape[2]
    keys = key.repeat_interleave(HEADS // KV_HEADS, 1)  # [G, H, S, D]
    terms = (query.abs() @ keys.abs().transpose(-1, -2) * scale).masked_fill(~mask, 0).amax(-1)  # [G, H, S]
    spread = value.abs().amax(dim=(1, 2, 3))[:, None, None]  # [G, 1, 1]
    return 2 * gamma(DIM + 2 * width + 8) * ((terms + 1) * spread).transpose(1, 2)[..., None]  # [G, S, H, 1]


@pytest.mark.parametrize("seed", range(6))
def test_parts_equal_the_dense_mask_outputs_and_gradients(seed):
    layout = plan(*_batch(seed), TOKENS)
    assert layout is not None and layout.groups.shared > 0
    groups, width = len(layout.input_ids), layout.input_ids.shape[1]
    torch.manual_seed(seed)
    query = torch.randn(groups, HEADS, width, DIM, dtype=torch.float64, requires_grad=True)
    key = torch.randn(groups, KV_HEADS, width, DIM, dtype=torch.float64, requires_grad=True)
    value = torch.randn(groups, KV_HEADS, width, DIM, dtype=torch.float64, requires_grad=True)
    scale, mask = DIM**-0.5, layout.dense_mask()
    real = (layout.segments >= -1)[:, :, None, None]  # [G, S, 1, 1]: the padding queries' outputs are never read
    parts, dense = grouped_attention(query, key, value, layout.groups, scale, 0.0), _dense(query, key, value, mask, scale)
    assert parts.shape == dense.shape == (groups, width, HEADS, DIM) and bool(parts.isfinite().all())
    bound = _bound(query, key, value, mask, scale).detach()
    assert (((parts - dense).abs() - bound) * real).max().item() <= 0
    weights = torch.randn_like(parts) * real  # a loss of the real outputs only
    grads_parts = torch.autograd.grad((parts * weights).sum(), (query, key, value))
    grads_dense = torch.autograd.grad((dense * weights).sum(), (query, key, value))
    for name, got, want in zip("qkv", grads_parts, grads_dense):
        scale_of = want.abs().amax().item() + 1
        assert (got - want).abs().max().item() <= 64 * gamma(DIM + 2 * width + 8) * scale_of * width, name


def test_a_wrong_visibility_is_an_order_one_difference():
    """The bound above is tight enough to see a key wrongly attended: the parts against a dense
    mask that also lets answer 2 see answer 1 (group 0 of the hand-worked batch)."""
    from tests.unit.test_shared_prompts import _hand_batch

    layout = plan(*_hand_batch(), TOKENS)
    torch.manual_seed(0)
    width = layout.input_ids.shape[1]  # 5: [5, 6 | 7, 8 | 7] (test_shared_prompts.test_layout_by_hand)
    query = torch.randn(2, HEADS, width, DIM, dtype=torch.float64)
    key = torch.randn(2, KV_HEADS, width, DIM, dtype=torch.float64)
    value = torch.randn(2, KV_HEADS, width, DIM, dtype=torch.float64)
    leaky = layout.dense_mask().clone()
    leaky[0, 0, 4:, 2:4] = True  # answer 2 (position 4) sees answer 1 (2, 3)
    parts = grouped_attention(query, key, value, layout.groups, DIM**-0.5, 0.0)
    diff = (parts - _dense(query, key, value, leaky, DIM**-0.5))[0, 4:].abs().max().item()
    assert diff > 1e3 * _bound(query, key, value, leaky, DIM**-0.5).max().item()


def test_without_the_keyword_the_dispatch_is_transformers_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Attention:
        num_key_value_groups, is_causal, training = HEADS // KV_HEADS, True, False

    torch.manual_seed(0)
    query, key, value = torch.randn(3, HEADS, 5, DIM), torch.randn(3, KV_HEADS, 5, DIM), torch.randn(3, KV_HEADS, 5, DIM)
    mask = torch.ones(3, 1, 5, 5, dtype=torch.bool).tril()
    got, _ = _dispatch(Attention, query, key, value, mask, dropout=0.0, scaling=0.3)
    want, _ = sdpa_attention_forward(Attention, query, key, value, mask, dropout=0.0, scaling=0.3)
    assert torch.equal(got, want)


def test_a_forward_that_skips_the_parts_fails():
    """``counting`` raises when fewer attention calls than decoder layers took the parts (a model
    whose attention did not receive the keyword read the placeholder mask instead)."""
    layout = plan(*_batch(0), TOKENS)
    with pytest.raises(RuntimeError, match="1 of 2 attention layers computed the prompt-grouped attention"):
        with layout.groups.counting(2):
            _dispatch(None, *(torch.zeros(len(layout.input_ids), h, layout.input_ids.shape[1], DIM)
                              for h in (HEADS, KV_HEADS, KV_HEADS)), placeholder_mask(1, torch.device("cpu")),
                      heron_groups=layout.groups)
    with layout.groups.counting(0):  # the count starts again at each forward
        pass
