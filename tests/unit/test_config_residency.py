"""colocate / offload config: defaults follow colocate; a colocated component must sleep."""

from __future__ import annotations

import pytest

from heron.config.base import ConfigError, build
from heron.config.residency import OffloadConfig, resolve_offload
from heron.config.root import HeronConfig

REQUIRED = {"model": {"path": "m"}, "data": {"path": "d"}}


def test_offload_defaults_follow_colocate():
    assert resolve_offload(True, OffloadConfig()) == (True, True)
    assert resolve_offload(False, OffloadConfig()) == (False, False)
    assert resolve_offload(False, OffloadConfig(train=True)) == (True, False)


def test_colocate_without_offload_is_rejected_with_the_fix():
    with pytest.raises(ConfigError, match="colocate=true needs both components able to sleep.*offload.rollout=False"):
        build(HeronConfig, {**REQUIRED, "colocate": True, "offload": {"rollout": False}})


def test_yaml_null_and_bad_types():
    cfg = build(HeronConfig, {**REQUIRED, "colocate": True, "offload": {"train": None}})
    assert cfg.colocate and cfg.offload.train is None
    with pytest.raises(ConfigError, match="'colocate' must be true or false"):
        build(HeronConfig, {**REQUIRED, "colocate": "yes"})
    with pytest.raises(ConfigError, match="offload.wait_timeout_s must be > 0"):
        build(HeronConfig, {**REQUIRED, "offload": {"wait_timeout_s": 0}})
