"""``model.lora`` (heron.config.lora): defaults off, one-line errors for impossible settings,
documented in `heron config`; the pre-flight checks the target names against the model
(heron.preflight.lora_targets) and the fingerprint of a run without LoRA is as before the key."""

from __future__ import annotations

import pytest

from heron.config.base import ConfigError
from heron.config.root import load_config
from heron.preflight.lora_targets import check_lora_targets


def _cfg(*overrides: str):
    return load_config(None, ["model.path=m", "data.path=d", *overrides])


def test_off_by_default_with_peft_defaults():
    lora = _cfg().model.lora
    assert not lora.enabled and lora.rank == 8 and lora.alpha == 16.0 and lora.dropout == 0.0
    assert lora.target_modules == ["all-linear"] and lora.scaling == 2.0


@pytest.mark.parametrize("override, message", [
    ("model.lora.rank=0", "model.lora.rank must be >= 1, got 0"),
    ("model.lora.rank=-4", "model.lora.rank must be >= 1, got -4"),
    ("model.lora.alpha=0", "model.lora.alpha must be > 0, got 0.0"),
    ("model.lora.dropout=1", "model.lora.dropout must be in [0, 1), got 1.0"),
    ("model.lora.target_modules=[]", "model.lora.target_modules must name at least one layer (or [all-linear])"),
    ("model.lora.target_modules=[all-linear,q_proj]", "model.lora.target_modules: all-linear stands alone, got ['all-linear', 'q_proj']"),
    ("model.lora.target_modules=[q_proj,q_proj]", "model.lora.target_modules lists a layer twice: ['q_proj', 'q_proj']"),
    ("model.lora.ranks=4", "unknown config key 'model.lora.ranks'; did you mean 'model.lora.rank'?"),
])
def test_impossible_settings_fail_in_one_line(override, message):
    with pytest.raises(ConfigError) as error:
        _cfg(override)
    assert str(error.value).endswith(message) and "\n" not in str(error.value)


def test_heron_config_documents_every_key(capsys):
    from heron.cli import main

    assert main(["config"]) == 0
    out = capsys.readouterr().out
    for key in ("model.lora.enabled", "model.lora.rank", "model.lora.alpha", "model.lora.dropout", "model.lora.target_modules"):
        assert key in out, key


def test_target_names_are_checked_against_the_model(toy_model_dir):
    model = lambda targets: _cfg(f"model.path={toy_model_dir}", "model.lora.enabled=true", f"model.lora.target_modules={targets}").model
    check_lora_targets(model("[q_proj,v_proj]"))
    check_lora_targets(model("[self_attn.o_proj,mlp.down_proj]"))  # dotted suffixes, as peft matches them
    check_lora_targets(model("[all-linear]"))
    with pytest.raises(ConfigError, match=r"^model.lora.target_modules: 'qproj' is not a linear layer of the model at .*; "
                       r"its linear layers are down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj \(or use \[all-linear\]\)$"):
        check_lora_targets(model("[q_proj,qproj]"))
    with pytest.raises(ConfigError, match="^model.lora.target_modules: lm_head is the output head"):
        check_lora_targets(model("[lm_head]"))
    check_lora_targets(_cfg(f"model.path={toy_model_dir}", "model.lora.target_modules=[nothing]").model)  # off: not checked


def test_a_run_without_lora_fingerprints_as_before_the_key():
    """Checkpoints saved before model.lora existed resume: the keys count only when enabled."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.config.base import to_dict

    off = config_fingerprint(to_dict(_cfg("model.lora.rank=4")))
    assert not [k for k in off if k.startswith("model.lora")]
    on = config_fingerprint(to_dict(_cfg("model.lora.enabled=true")))
    assert on["model.lora.rank"] == 8 and on["model.lora.enabled"] is True
