"""Config values that used to be accepted and broke a run later (issue 9, items 2.7, 2.13,
2.15, 3): non-finite numbers, a group baseline over groups of one, a remote reward that leaks
data columns or speaks another protocol, and a reward deadline of "never"."""

import dataclasses
import math
import typing

import pytest

from heron.config import ConfigError, load_config
from heron.algo.catalog import ADVANTAGES
from heron.config.algo import AlgoConfig
from heron.config.reward import RemoteRewardConfig, RewardConfig
from heron.config.root import HeronConfig

BASE = ["model.path=m", "data.path=d.jsonl"]


def _float_keys(cls=HeronConfig, prefix=""):
    """Every float (or list-of-float) leaf key of the config tree."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.metadata.get('key', f.name)}"
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            yield from _float_keys(hint, key + ".")
        elif hint is float or hint == list[float]:
            yield key, hint


FLOAT_KEYS = list(_float_keys())


def test_the_float_keys_are_found():
    keys = [k for k, _ in FLOAT_KEYS]
    assert {"train.lr", "rollout.temperature", "reward.failure_value", "train.betas"} <= set(keys)


@pytest.mark.parametrize("key,hint", FLOAT_KEYS, ids=[k for k, _ in FLOAT_KEYS])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", ".inf", ".nan"])
def test_every_float_key_rejects_non_finite_values(key, hint, value):
    raw = f"[{value}, {value}]" if hint == list[float] else value
    with pytest.raises(ConfigError) as e:
        load_config(None, [*BASE, f"{key}={raw}"])
    message = str(e.value)
    assert key in message and "finite" in message and "\n" not in message


def test_finite_values_still_coerce():
    cfg = load_config(None, [*BASE, "train.lr=5e-5", "reward.failure_value=-1", "train.betas=[0.8, 0.99]"])
    assert (cfg.train.lr, cfg.reward.failure_value, cfg.train.betas) == (5e-5, -1.0, [0.8, 0.99])


@pytest.mark.parametrize("advantage", [a for a, info in ADVANTAGES.items() if info.needs_group])
def test_group_baseline_with_groups_of_one_is_a_config_error(advantage):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*BASE, f"algo.advantage={advantage}", "rollout.samples_per_prompt=1"])
    message = str(e.value)
    assert "rollout.samples_per_prompt=1" in message and advantage in message and "\n" not in message
    load_config(None, [*BASE, f"algo.advantage={advantage}", "rollout.samples_per_prompt=2"])


def test_a_hook_advantage_may_train_on_groups_of_one():
    cfg = load_config(None, [*BASE, "rollout.samples_per_prompt=1", "hooks.advantage=my.mod:adv"])
    assert cfg.rollout.samples_per_prompt == 1


def test_every_estimator_declares_whether_it_needs_a_group():
    """A new estimator in algo.advantage must say whether its baseline is the group."""
    choices = typing.get_args(typing.get_type_hints(AlgoConfig)["advantage"])
    assert set(choices) == set(ADVANTAGES)
    assert all(isinstance(ADVANTAGES[name].needs_group, bool) for name in choices)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/score", "file:///etc/passwd", "127.0.0.1:8000/score", "http://"])
def test_remote_reward_url_must_be_http(url):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*BASE, "reward.fn=remote", f"reward.remote.url={url}"])
    assert "reward.remote.url" in str(e.value) and "http" in str(e.value) and "\n" not in str(e.value)


def test_remote_reward_accepts_http_and_https_and_keeps_metadata_private_by_default():
    for url in ("http://127.0.0.1:8000/score", "https://rm.example.org/score"):
        assert RemoteRewardConfig(url=url).url == url
    assert RemoteRewardConfig().send_metadata is False


def test_reward_deadline_is_finite_by_default():
    timeout = RewardConfig().timeout_s
    assert 0 < timeout < math.inf
    # above the worst case of one remote request and its retries at their defaults, so the
    # scorer's deadline never cuts a remote reward off while it is still retrying
    remote = RemoteRewardConfig()
    retries_s = remote.timeout_s * (remote.max_retries + 1) + remote.backoff_s * (2 ** remote.max_retries - 1)
    assert timeout > retries_s
