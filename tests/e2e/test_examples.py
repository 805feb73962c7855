"""Each example in examples/ runs in a short real run on the toy model and does what its
docstring says."""

import math
from pathlib import Path

import pytest

from heron.loop import train
from heron.plugins.loader import load_hook, resolve
from heron.rl_run import RLRun
from heron.trainer.batch import collate
from tests.tolerance import assert_logprobs_close, reduction_length

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def _step(run: RLRun, rollout_id: int = 0):
    batch = run.reward(run.generate(rollout_id))
    return run.advantages(batch)


def test_custom_reward_example_scores_every_sample(run_config):
    spec = f"{EXAMPLES}/custom_reward.py:digit_credit"
    digit_credit = load_hook("reward", spec)
    P = lambda label: type("P", (), {"label": label})()  # noqa: E731
    assert [digit_credit(P("47"), r) for r in ["47", "48", "17", "x", "147"]] == [1.0, 0.25, 0.25, 0.0, 0.25]
    with RLRun(run_config(f"reward.fn={spec}")) as run:
        batch = _step(run)
        for group in batch.groups:
            for s in group.samples:
                assert s.reward == digit_credit(group.prompt, s.response_text)
    records = train(run_config(f"reward.fn={spec}"))
    assert len(records) == 2 and all(0.0 <= r["reward/mean"] <= 1.0 for r in records)


@pytest.mark.portability
def test_calculator_tool_use_example(run_config):
    calc = f"{EXAMPLES}/calculator_generate.py"
    calculator, _ = resolve(f"{calc}:calculator")  # the example's tool, the same module object
    cfg = run_config(f"hooks.generate={calc}:generate", "hooks.args.think_tokens=3", "rollout.max_new_tokens=3")
    with RLRun(cfg) as run:
        batch = _step(run)
        tok = run.c.tokenizer
        for group in batch.groups:
            for s in group.samples:
                mask = s.loss_mask
                first_tool, last_tool = mask.index(0), len(mask) - 1 - mask[::-1].index(0)
                assert set(mask[first_tool : last_tool + 1]) == {0}  # one contiguous tool segment
                assert all(lp == 0.0 for lp in s.response_logprobs[first_tool : last_tool + 1])
                think = tok.decode(s.response_tokens[:first_tool])
                value = calculator(think) or calculator(group.prompt.text)
                assert tok.decode(s.response_tokens[first_tool : last_tool + 1]) == f"[calc: {value}]"
                assert s.response_text == tok.decode(s.response_tokens[last_tool + 1 :], skip_special_tokens=True)
        # the engine's logprobs of policy tokens, sampled after the tool output, are what the
        # trainer recomputes from the full sequence: the multi-turn context is consistent
        train_batch = collate(batch.samples, tok.pad_token_id)
        recomputed = run.c.trainer.compute_logprobs(train_batch)
        config = run.c.trainer.model.config
        assert_logprobs_close(recomputed, train_batch.old_logprobs * train_batch.loss_mask,
                              n=reduction_length(config, tokens=train_batch.input_ids.numel()), log_vocab=math.log(config.vocab_size))
        metrics = run.train(batch)
        assert math.isfinite(metrics["loss"])


def test_postprocess_example_zeroes_truncated_advantages(run_config):
    spec = f"{EXAMPLES}/postprocess.py:zero_truncated_advantages"
    cfg = run_config(f"hooks.rollout_data_postprocess={spec}", "hooks.args.truncated_advantage=-0.25",
                     "rollout.max_new_tokens=2", "reward.fn=numeric_match")
    with RLRun(cfg) as run:
        batch = _step(run)
        before = {s.sample_id: s.advantage for s in batch.samples}
        batch = run.postprocess(batch)
        truncated = [s for s in batch.samples if s.finish_reason == "length"]
        assert truncated, "max_new_tokens=2 should truncate some answers"
        for s in batch.samples:
            assert s.advantage == (-0.25 if s.finish_reason == "length" else before[s.sample_id])
        assert math.isfinite(run.train(batch)["loss"])
    assert len(train(cfg)) == 2


@pytest.mark.parametrize("name", ["custom_reward.py", "calculator_generate.py", "postprocess.py"])
def test_examples_have_a_usage_docstring(name):
    import ast

    doc = ast.get_docstring(ast.parse((EXAMPLES / name).read_text()))
    assert doc and "heron train" in doc
