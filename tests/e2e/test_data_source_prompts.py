"""A user data source's prompts are not seen by the pre-flight, so the loop checks what it
hands out (issue 9, item 2.10): an empty prompt is named instead of crashing the engine."""

from pathlib import Path

import pytest

from heron.plugins.loader import resolve
from heron.rl_run import RLRun
from heron.rollout.custom_generate import HookOutputError

SPIES = Path(__file__).resolve().parent.parent / "fixtures" / "hooks" / "spies.py"


def test_an_empty_prompt_from_a_data_source_hook_is_named(run_config):
    resolve(f"{SPIES}:reset")[0]()
    with RLRun(run_config(f"hooks.data_source={SPIES}:EmptyPromptSource")) as run:
        with pytest.raises(HookOutputError, match=r"get_samples\(2\) returned empty prompts \(prompt_id \[\d+\]\)"):
            run.generate(0)
