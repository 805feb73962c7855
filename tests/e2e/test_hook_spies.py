"""Every hook point is called during a short real run, with the documented arguments: the
right rollout_id, the right prompts and data, in the documented order
(data source -> generate -> reward -> advantage -> post-process -> policy loss)."""

from pathlib import Path

import pytest

from heron.config.data import DataConfig
from heron.config.hooks import HooksConfig
from heron.loop import train
from heron.plugins.loader import resolve
from heron.records import RolloutBatch

SPIES = Path(__file__).resolve().parent.parent / "fixtures" / "hooks" / "spies.py"
NUM_ROLLOUTS, BATCH, GROUP = 2, 2, 3


@pytest.fixture
def spied_run(run_config, addition_data):
    module_reset, _ = resolve(f"{SPIES}:reset")
    module_reset()
    calls, _ = resolve(f"{SPIES}:CALLS")
    cfg = run_config(
        f"hooks.data_source={SPIES}:SpySource", f"hooks.generate={SPIES}:generate", f"reward.fn={SPIES}:reward",
        f"hooks.advantage={SPIES}:advantage", f"hooks.rollout_data_postprocess={SPIES}:postprocess",
        f"hooks.policy_loss={SPIES}:policy_loss", "hooks.args.scale=2.0", "algo.clip_high=0.28",
        f"eval.sets.hard={addition_data['hard']}", "eval.interval=1",
    )
    records = train(cfg)
    return cfg, calls, records


def test_data_source_is_built_with_its_config_and_asked_once_per_rollout(spied_run):
    cfg, calls, _ = spied_run
    assert len(calls["source_init"]) == 1
    config, seed = calls["source_init"][0]
    assert isinstance(config, DataConfig) and config == cfg.data and seed == cfg.run.seed
    assert calls["get_samples"] == [(BATCH, [1, 2]), (BATCH, [3, 4])]


def test_generate_is_called_per_sample_with_the_rollout_id(spied_run):
    _, calls, _ = spied_run
    keys = [(r, p, i) for r, p, i, _ in calls["generate"]]
    assert keys == [(r, p, i) for r, ps in [(0, [1, 2]), (1, [3, 4])] for p in ps for i in range(GROUP)]


def test_reward_scores_the_generated_responses_and_the_eval_answers(spied_run):
    _, calls, _ = spied_run
    generated = [(p, text) for _, p, _, text in calls["generate"]]
    assert [(p, text) for src, p, text, _ in calls["reward"] if src == "train"] == generated
    eval_ids = [p for src, p, _, _ in calls["reward"] if src == "eval"]
    assert eval_ids == [0, 1, 2, 3, 4] * (1 + NUM_ROLLOUTS)  # the 'hard' set before rollout 0 and after each


def test_advantage_gets_the_whole_batchs_rewards_once_per_rollout(spied_run):
    _, calls, _ = spied_run
    values = [v for src, _, _, v in calls["reward"] if src == "train"]
    per_rollout = BATCH * GROUP
    expected = [
        [values[r * per_rollout + k * GROUP : r * per_rollout + (k + 1) * GROUP] for k in range(BATCH)]
        for r in range(NUM_ROLLOUTS)
    ]
    assert calls["advantage"] == expected  # one [G, N] call per rollout, groups in batch order


def test_postprocess_gets_its_config_the_rollout_id_and_the_scored_batch(spied_run):
    cfg, calls, _ = spied_run
    assert [rollout_id for _, rollout_id, _ in calls["postprocess"]] == [0, 1]
    for config, rollout_id, batch in calls["postprocess"]:
        assert isinstance(config, HooksConfig) and config == cfg.hooks and config.args == {"scale": 2.0}
        assert isinstance(batch, RolloutBatch) and batch.rollout_id == rollout_id
        assert [g.prompt.prompt_id for g in batch.groups] == ([1, 2] if rollout_id == 0 else [3, 4])
        assert all(s.reward is not None and s.advantage is not None and s.rollout_id == rollout_id for s in batch.samples)


def test_policy_loss_trains_on_the_postprocessed_advantages(spied_run):
    cfg, calls, _ = spied_run
    assert len(calls["policy_loss"]) == NUM_ROLLOUTS  # one micro-batch of 6 per rollout
    for call, (_, _, batch) in zip(calls["policy_loss"], calls["postprocess"]):
        assert call["advantages"] == pytest.approx([2.0 * s.advantage for s in batch.samples])
        assert (call["clip_low"], call["clip_high"]) == (cfg.algo.clip_low, 0.28)
        assert call["normalizer"] == call["mask_tokens"] == sum(len(s.loss_mask) for s in batch.samples)


def test_named_eval_sets_are_logged_under_their_name(spied_run):
    _, _, records = spied_run
    assert all("eval/hard/accuracy" in r and r["eval/hard/num_prompts"] == 5.0 for r in records)
    assert not any("eval/accuracy" in r for r in records)
