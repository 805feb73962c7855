"""Contract tests of the hook loader: valid, invalid and edge-case hooks loaded for real
(from files and from modules), each failure a one-line HookError naming the hook point, the
expected signature, what was found and where it came from."""

from pathlib import Path

import pytest

from heron.algo.policy_loss import ppo_clip_loss
from heron.plugins.hooks import HOOK_POINTS
from heron.plugins.loader import HookError, load_hook

HOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "hooks"
VALID, INVALID = HOOKS / "valid.py", HOOKS / "invalid.py"


@pytest.mark.parametrize(
    "point, name",
    [
        ("reward", "reward"),
        ("reward", "async_reward"),  # the reward point accepts async def
        ("reward", "reward_with_default"),  # extra optional parameters are fine
        ("reward", "reward_varargs"),
        ("reward", "scorer"),  # a callable instance
        ("group_reward", "group_reward"),
        ("rollout_data_postprocess", "postprocess"),
        ("advantage", "advantage"),
        ("policy_loss", "policy_loss"),
        ("policy_loss", "policy_loss_kwargs"),  # documented keywords through **kwargs
        ("data_source", "Source"),
    ],
)
def test_valid_hooks_load_from_a_file(point, name):
    hook = load_hook(point, f"{VALID}:{name}")
    assert callable(hook)


def test_module_colon_and_dotted_forms_give_the_same_function():
    assert load_hook("policy_loss", "heron.algo.policy_loss:ppo_clip_loss") is ppo_clip_loss
    assert load_hook("policy_loss", "heron.algo.policy_loss.ppo_clip_loss") is ppo_clip_loss


def test_same_file_loads_as_one_module():
    assert load_hook("reward", f"{VALID}:reward") is load_hook("reward", f"{VALID}:reward")


def _error(point: str, spec: str) -> str:
    with pytest.raises(HookError) as info:
        load_hook(point, spec)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(HOOK_POINTS[point].config_key), message
    return message


@pytest.mark.parametrize(
    "point, name, reason",
    [
        ("reward", "reward_one_param", "takes 1 positional parameters, heron passes 2"),
        ("reward", "reward_three_required", "requires 3 positional parameters, heron passes 2"),
        ("reward", "reward_kwargs_only", "takes 0 positional parameters"),
        ("reward", "reward_required_kwonly", "requires keyword-only parameter 'scale'"),
        ("rollout_data_postprocess", "async_postprocess", "it is async (async def)"),
        ("policy_loss", "policy_loss_no_kw", "does not accept keyword argument 'clip_low'"),
        ("reward", "RewardClass", "it is a class"),
        ("reward", "not_callable", "not callable"),
        ("data_source", "SourceMissingMethod", "it has no method add_samples()"),
        ("data_source", "SourceBadInit", "__init__() takes 1 positional parameters, heron passes 2 (config, seed)"),
        ("data_source", "source_function", "this hook point takes a class"),
    ],
)
def test_invalid_hooks_fail_with_one_line_naming_expected_found_and_where(point, name, reason):
    message = _error(point, f"{INVALID}:{name}")
    assert reason in message
    assert "expected " in message and "found " in message
    if name != "not_callable":
        assert f"{INVALID}:" in message  # where it came from: file:line


def test_expected_signature_in_the_error_is_the_documented_one():
    message = _error("reward", f"{INVALID}:reward_one_param")
    assert "expected def or async def reward(prompt: Prompt, response: str) -> float" in message
    assert "found def reward_one_param(prompt)" in message


@pytest.mark.parametrize(
    "spec, reason",
    [
        (f"{HOOKS}/missing.py:f", "does not exist"),
        (f"{VALID}:no_such_function", "has no attribute 'no_such_function'"),
        ("{tmp}/broken_import.py:f", "raised RuntimeError: this hook module fails to import"),
        ("{tmp}/syntax_error.py:reward", "raised SyntaxError: '(' was never closed (line 1)"),
        ("no_such_package.module:f", "ModuleNotFoundError"),
        ("heron.algo.policy_loss:nothing_here", "has no attribute 'nothing_here'"),
        ("just_a_name", "is not a hook path"),
        (f"{VALID}", "is not a hook path"),
    ],
)
def test_unloadable_hooks_fail_with_one_line(tmp_path, spec, reason):
    (tmp_path / "broken_import.py").write_text('raise RuntimeError("this hook module fails to import")\n')
    (tmp_path / "syntax_error.py").write_text("def reward(prompt, response:\n    return 1\n")
    assert reason in _error("reward", spec.format(tmp=tmp_path))


def test_missing_attribute_lists_what_the_file_defines():
    assert "it defines: " in _error("reward", f"{VALID}:rewrd") and "reward" in _error("reward", f"{VALID}:rewrd")


def test_dotted_path_to_a_method_of_a_class_in_a_module():
    from heron.data.source import PromptDataSource

    hook = load_hook("data_source", "heron.data.source.PromptDataSource")
    assert hook is PromptDataSource
    assert load_hook("data_source", "heron.data.source:PromptDataSource") is PromptDataSource


def test_builtin_data_source_fits_its_own_hook_point():
    from heron.plugins.hooks import HOOK_POINTS
    from heron.plugins.loader import check_hook
    from heron.data.source import PromptDataSource

    assert check_hook(HOOK_POINTS["data_source"], PromptDataSource) == ""


def test_builtins_fit_the_hook_points_they_stand_in_for():
    from heron.algo.advantages import ADVANTAGE_ESTIMATORS
    from heron.algo.losses import POLICY_LOSSES
    from heron.config.reward import RemoteRewardConfig
    from heron.plugins.loader import check_hook
    from heron.reward.builtin import BUILTIN_REWARDS
    from heron.reward.remote import RemoteReward

    for fn in [*BUILTIN_REWARDS.values(), RemoteReward(RemoteRewardConfig(url="http://127.0.0.1:1/"))]:
        assert check_hook(HOOK_POINTS["reward"], fn) == ""
    for fn in ADVANTAGE_ESTIMATORS.values():
        assert check_hook(HOOK_POINTS["advantage"], fn) == ""
    for fn in POLICY_LOSSES.values():
        assert check_hook(HOOK_POINTS["policy_loss"], fn) == ""


def test_an_advantage_hook_returning_the_wrong_shape_is_named():
    import torch

    from heron.algo.assign import assign_advantages
    from heron.records import Group, Prompt, RolloutBatch, Sample

    samples = [Sample(0, 0, i, 0, [1], [2], [0.0], [1], "x", "stop", reward=float(i)) for i in range(3)]
    batch = RolloutBatch(0, 0, [Group(Prompt(0, "q", "a"), samples)])
    with pytest.raises(ValueError, match=r"returned \(1, 2\) for rewards of shape \(1, 3\)"):
        assign_advantages(batch, lambda rewards: torch.zeros(1, 2))
