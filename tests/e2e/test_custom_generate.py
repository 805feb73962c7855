"""Custom generate hooks against the built-in generator: a single-turn hook written with the
GenerateContext helpers draws exactly the built-in samples (sync, async and group scope), and
a hook that breaks the record contract stops the run with one line."""

import math
from pathlib import Path

import pytest

from heron.rl_run import RLRun
from heron.rollout.custom_generate import HookOutputError
from tests.tolerance import assert_logprobs_close, reduction_length

SPIES = Path(__file__).resolve().parent.parent / "fixtures" / "hooks" / "spies.py"


def _tokens(cfg, rollout_id=1):
    from heron.plugins.loader import resolve

    resolve(f"{SPIES}:reset")[0]()
    with RLRun(cfg) as run:
        batch = run.generate(rollout_id)
    return [(s.prompt_id, s.sample_index, s.response_tokens, s.response_logprobs, s.loss_mask) for s in batch.samples]


@pytest.mark.portability
def test_context_helpers_reproduce_the_builtin_generator(run_config, toy_model_dir):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(toy_model_dir)
    n = reduction_length(config, tokens=config.max_position_embeddings)  # one-by-one vs batched rows
    builtin = _tokens(run_config())
    for overrides in (
        [f"hooks.generate={SPIES}:generate"],
        [f"hooks.generate={SPIES}:async_generate"],
        [f"hooks.generate={SPIES}:generate_group", "hooks.generate_scope=group"],
    ):
        custom = _tokens(run_config(*overrides))
        # same tokens and masks (rule 4); logprobs up to round-off (batched vs one-by-one decoding, rule 2)
        assert [(p, i, t, m) for p, i, t, _, m in custom] == [(p, i, t, m) for p, i, t, _, m in builtin], overrides
        for (*_, lp, _m), (*_, ref, _r) in zip(custom, builtin):
            assert_logprobs_close(lp, ref, n=n, log_vocab=math.log(config.vocab_size))


def test_wrong_sample_ids_stop_the_run_with_one_line(run_config):
    with RLRun(run_config(f"hooks.generate={SPIES}:generate_wrong_ids")) as run:
        with pytest.raises(HookOutputError, match=r"^hooks.generate .* sample 0 has ids \(rollout 1, prompt \d+, index 0\), expected \(0, \d+, 0\)$"):
            run.generate(0)


def test_scope_mismatch_is_caught_at_load(run_config):
    from heron.plugins.loader import HookError

    cfg = run_config(f"hooks.generate={SPIES}:generate", "hooks.generate_scope=group")
    with pytest.raises(HookError, match=r"^hooks.generate \(hooks.generate_scope=group\): .*requires 3 positional parameters, heron passes 2 \(ctx, prompt\)"):
        RLRun(cfg)


def test_async_hooks_share_one_engine_batch_per_turn(run_config):
    cfg = run_config(f"hooks.generate={SPIES}:async_two_turns")  # 2 prompts x 3 samples
    with RLRun(cfg) as run:
        sizes = []
        engine_generate = run.c.engine.generate

        def counting(requests):
            sizes.append(len(requests))
            return engine_generate(requests)

        run.c.engine.generate = counting
        batch = run.generate(0)
    # turn 1: all 6 samples in one call; turn 2: the 4 samples with sample_index > 0
    assert sizes == [6, 4]
    assert [s.loss_mask.count(0) > 0 for s in batch.samples] == [False, True, True] * 2


def test_data_source_returning_too_few_prompts_is_named(run_config):
    from heron.plugins.loader import resolve

    resolve(f"{SPIES}:reset")[0]()
    with RLRun(run_config(f"hooks.data_source={SPIES}:ShortSource")) as run:
        with pytest.raises(HookOutputError, match=r"get_samples\(2\) returned 1 items, expected a list of 2 Prompt records"):
            run.generate(0)
