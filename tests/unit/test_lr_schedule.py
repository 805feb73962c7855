import math

import pytest

from heron.trainer.lr_schedule import lr_multiplier


def test_warmup_then_constant():
    m = [lr_multiplier(s, warmup_steps=4, total_steps=10, schedule="constant", min_lr_ratio=0.1) for s in range(6)]
    assert m == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_hits_midpoint_and_floor():
    kw = dict(warmup_steps=0, total_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_multiplier(0, **kw) == pytest.approx(1.0)
    assert lr_multiplier(5, **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))  # 0.55
    assert lr_multiplier(10, **kw) == pytest.approx(0.1)
    assert lr_multiplier(50, **kw) == pytest.approx(0.1)
