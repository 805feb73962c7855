"""Hand-worked checks of the pure token-selection functions in heron.rollout.sampling."""

import math

import pytest
import torch

from heron.rollout.sampling import (
    draw_uniforms,
    sample_tokens,
    sample_with_uniforms,
    scale_by_temperature,
    select_tokens,
    top_p_filter,
)

pytestmark = pytest.mark.portability  # float results against hand-worked numbers

NEG_INF = float("-inf")


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs], dtype=torch.float64).log()  # [1, V]


def test_temperature_scaling_divides_each_row_by_its_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0], [3.0, -3.0, 0.0]])
    scaled = scale_by_temperature(logits, torch.tensor([0.5, 2.0]))
    assert torch.equal(scaled, torch.tensor([[4.0, 2.0, 0.0], [1.5, -1.5, 0.0]]))


def test_temperature_sharpens_softmax_by_hand():
    # logits [ln 2, 0]: T=1 -> p = [2/3, 1/3]; T=0.5 -> logits [2 ln 2, 0] -> p = [4/5, 1/5].
    logits = torch.tensor([[math.log(2.0), 0.0]], dtype=torch.float64)
    probs_t1 = scale_by_temperature(logits, torch.tensor([1.0], dtype=torch.float64)).softmax(-1)
    probs_t05 = scale_by_temperature(logits, torch.tensor([0.5], dtype=torch.float64)).softmax(-1)
    assert torch.allclose(probs_t1, torch.tensor([[2 / 3, 1 / 3]], dtype=torch.float64))
    assert torch.allclose(probs_t05, torch.tensor([[0.8, 0.2]], dtype=torch.float64))


@pytest.mark.parametrize(
    "top_p, kept",
    [
        (0.75, [True, True, False, False]),  # mass before token 3 = 0.8 >= 0.75
        (0.5, [True, False, False, False]),  # 0.5 alone reaches 0.5
        (0.51, [True, True, False, False]),
        (0.9, [True, True, True, False]),  # 0.5 + 0.3 = 0.8 < 0.9, 0.95 >= 0.9
        (1.0, [True, True, True, True]),
        (1e-6, [True, False, False, False]),  # tiny p still keeps the top token
    ],
)
def test_top_p_keeps_the_nucleus(top_p, kept):
    logits = _logits([0.5, 0.3, 0.15, 0.05])
    filtered = top_p_filter(logits, torch.tensor([top_p], dtype=torch.float64))
    assert (filtered[0] != NEG_INF).tolist() == kept
    assert torch.equal(filtered[0][filtered[0] != NEG_INF], logits[0][torch.tensor(kept)])


def test_top_p_is_per_row_and_ignores_token_order():
    logits = torch.cat([_logits([0.05, 0.15, 0.3, 0.5]), _logits([0.5, 0.3, 0.15, 0.05])])
    filtered = top_p_filter(logits, torch.tensor([0.75, 1e-3], dtype=torch.float64))
    assert (filtered != NEG_INF).tolist() == [[False, False, True, True], [True, False, False, False]]


def test_inverse_cdf_sampling_picks_the_interval_holding_u():
    # probs [0.5, 0.3, 0.2] -> cdf [0.5, 0.8, 1.0]
    logits = _logits([0.5, 0.3, 0.2]).expand(5, 3)
    uniforms = torch.tensor([0.0, 0.49, 0.5, 0.79, 0.99])
    assert sample_with_uniforms(logits, uniforms).tolist() == [0, 0, 1, 1, 2]


def test_sampling_never_picks_a_filtered_token():
    logits = torch.tensor([[0.0, 0.0, NEG_INF, NEG_INF]]).expand(3, 4)
    uniforms = torch.tensor([0.0, 0.5, 1.0 - 2**-53], dtype=torch.float64)
    assert sample_with_uniforms(logits, uniforms).tolist() == [0, 1, 1]


def test_sample_tokens_uses_each_rows_own_generator():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    row = logits[2:3]
    alone = sample_tokens(row, [torch.Generator().manual_seed(7)])
    batched = sample_tokens(logits, [torch.Generator().manual_seed(s) for s in (1, 2, 7, 3)])
    assert batched[2] == alone[0]


def test_draw_uniforms_depend_only_on_the_rows_seed():
    short = draw_uniforms([torch.Generator().manual_seed(5)], 3)
    long = draw_uniforms([torch.Generator().manual_seed(9), torch.Generator().manual_seed(5)], 8)
    assert torch.equal(long[1, :3], short[0])


def test_select_tokens_reports_untruncated_logprob_at_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [2.0, 1.0, 0.0, -1.0]])
    temperature = torch.tensor([0.5, 1.0])
    top_p = torch.tensor([0.5, 1.0])
    greedy = torch.tensor([False, True])
    tokens, logprobs = select_tokens(logits, temperature, torch.tensor([0.3, 0.9]), top_p, greedy)
    assert tokens.tolist() == [0, 0]  # row 0: nucleus is token 0 alone; row 1: argmax
    expected = [(logits[0] / 0.5).log_softmax(-1)[0], logits[1].log_softmax(-1)[0]]
    assert torch.allclose(logprobs, torch.stack(expected))
