"""Config validation: every user mistake is one ConfigError line that names the key and the fix."""

import pytest

from heron.config import ConfigError, load_config
from heron.config.base import apply_overrides, field_docs
from heron.config.root import HeronConfig

BASE = ["model.path=m", "data.path=d.jsonl"]


def test_defaults_and_overrides_build_typed_sections():
    cfg = load_config(None, [*BASE, "rollout.batch_size=4", "train.lr=5e-5", "rollout.stop=[';']"])
    assert cfg.rollout.batch_size == 4
    assert cfg.train.lr == 5e-5  # "5e-5" is a string in YAML 1.1; still a number here
    assert cfg.rollout.stop == [";"]
    assert cfg.rollout.num_samples == 16


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.batchsize=4"], "unknown config key 'rollout.batchsize'; did you mean 'rollout.batch_size'?"),
        (["rollout.batch_size=four"], "config key 'rollout.batch_size' must be an integer, got 'four'"),
        (["rollout.batch_size=0"], "rollout.batch_size must be >= 1, got 0"),
        (["tracking.plot=maybe"], "config key 'tracking.plot' must be true or false, got 'maybe'"),
        (["algo.advantage=ppo"], "config key 'algo.advantage' must be one of ['grpo', 'dr_grpo', 'rloo', 'reinforce_plus_plus', 'reinforce_plus_plus_baseline', 'gae'], got 'ppo'"),
        (["rollout=3"], "config key 'rollout' must be a mapping of sub-keys, got 3"),
        (["train.steps_per_rollout=3"], "train.steps_per_rollout=3 must divide the 32 samples of a rollout"),
        (["rollout.top_p=1.5"], "rollout.top_p must be in (0, 1], got 1.5"),
        (["bogus=1"], "unknown config key 'bogus'"),
        (["tracking.profile.rollouts=[-1]"], "tracking.profile.rollouts names rollout ids from 0, got [-1]"),
        (["tracking.peak_tflops=-1"], "tracking.peak_tflops must be >= 0 (0: no perf/mfu), got -1"),
        (["rollout.num_rollouts=10", "tracking.profile.rollouts=[3, 12, 10]"],
         "tracking.profile.rollouts=[10, 12] lies past the last rollout: rollout.num_rollouts=10 runs rollouts 0..9"),
    ],
)
def test_bad_values_raise_one_line_errors(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*BASE, *overrides])
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_required_paths():
    with pytest.raises(ConfigError, match="model.path is required"):
        load_config(None, ["data.path=d.jsonl"])
    with pytest.raises(ConfigError, match="data.path is required"):
        load_config(None, ["model.path=m"])


def test_yaml_file_and_override_precedence(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {path: m}\ndata: {path: d}\nrollout: {batch_size: 2, samples_per_prompt: 2}\n")
    cfg = load_config(str(path), ["rollout.batch_size=3", "train.micro_batch_size=2", "train.steps_per_rollout=3"])
    assert (cfg.rollout.batch_size, cfg.rollout.samples_per_prompt) == (3, 2)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(tmp_path / "bad.yaml"))


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="must look like key.sub=value"):
        apply_overrides({}, ["rollout.batch_size"])
    with pytest.raises(ConfigError, match="is not a section"):
        apply_overrides({"a": 1}, ["a.b=2"])


def test_configs_are_frozen():
    cfg = load_config(None, BASE)
    with pytest.raises(Exception):
        cfg.rollout.batch_size = 3  # type: ignore[misc]


def test_every_field_is_documented():
    missing = [key for key, text, _ in field_docs(HeronConfig) if not text]
    assert missing == []


def test_shipped_configs_are_valid():
    from pathlib import Path

    for path in sorted(Path(__file__).resolve().parents[2].glob("configs/*.yaml")):
        load_config(str(path), BASE)
