"""Dynamic sampling's orchestration with a scripted generator: which groups are kept, how many
prompts each extra round draws, the cap, the top-up, the seeds, and the counts.

The generator is a stand-in (the real one is exercised end to end in
tests/e2e/test_algorithms.py): prompt p answers "right" for sample i when SCRIPT says so for
its round, so every group's informativeness is known in advance.
"""

from __future__ import annotations

import pytest

from heron.config.data import DataConfig
from heron.config.dynamic_sampling import DynamicSamplingConfig
from heron.data.source import PromptDataSource
from heron.records import Group, RolloutBatch, Sample
from heron.reward.scorer import RewardScorer
from heron.rollout.batch_filler import BatchFiller, is_informative
from heron.seeding import derive_seed
from heron.toy.addition import make_prompts, write_jsonl


class ScriptedGenerator:
    """Round 0 (seed None): prompts with an even id get mixed answers; extra rounds: ids divisible by 3."""

    def __init__(self):
        self.calls: list[tuple[list[int], int | None]] = []

    def generate(self, rollout_id, prompts, seed=None):
        self.calls.append(([p.prompt_id for p in prompts], seed))
        mixed = (lambda pid: pid % 2 == 0) if seed is None else (lambda pid: pid % 3 == 0)
        groups = []
        for p in prompts:
            texts = ["right", "wrong"] if mixed(p.prompt_id) else ["wrong", "wrong"]
            samples = [Sample(rollout_id, p.prompt_id, i, 0, [1], [2], [0.0], [1], t, "stop") for i, t in enumerate(texts)]
            groups.append(Group(p, samples))
        return RolloutBatch(rollout_id, 0, groups)


def _reward(prompt, response):
    return 1.0 if response == "right" else 0.0


def _filler(tmp_path, max_rounds=3):
    path = tmp_path / "prompts.jsonl"
    write_jsonl(make_prompts(30, seed=0, max_digits=1), path)
    source = PromptDataSource(DataConfig(path=str(path), shuffle=False), seed=0)
    generator = ScriptedGenerator()
    settings = DynamicSamplingConfig(enabled=True, max_rounds=max_rounds)
    return BatchFiller(RewardScorer(_reward), generator, source, settings, seed=0), generator, source


def test_refills_with_informative_groups_drawing_only_what_is_missing(tmp_path):
    filler, generator, source = _filler(tmp_path)
    first = generator.generate(0, source.get_samples(4))  # prompts 0..3: 0 and 2 informative
    batch = filler.score(first)
    # round 1 draws 2 prompts (4, 5): neither divisible by 3; round 2 draws 2 (6, 7): 6 kept;
    # round 3 draws 1 (8): not kept; cap reached -> top up with the first dropped group (prompt 1)
    assert [ids for ids, _ in generator.calls[1:]] == [[4, 5], [6, 7], [8]]
    assert [g.prompt.prompt_id for g in batch.groups] == [0, 2, 6, 1]
    m = filler.metrics()
    assert m["dynamic_sampling/rounds"] == 3.0
    assert m["dynamic_sampling/groups_drawn"] == 9.0
    assert m["dynamic_sampling/informative_fraction"] == pytest.approx(3 / 9)
    assert m["dynamic_sampling/groups_topped_up"] == 1.0
    assert m["dynamic_sampling/reward_mean_drawn"] == pytest.approx(3 / 18)  # 3 "right" among 18 samples
    assert m["reward/num_errors"] == 0.0


def test_extra_rounds_use_distinct_deterministic_seeds(tmp_path):
    filler, generator, source = _filler(tmp_path)
    filler.score(generator.generate(0, source.get_samples(4)))
    seeds = [seed for _, seed in generator.calls]
    assert seeds == [None] + [derive_seed(0, "dynamic_sampling", k) for k in (1, 2, 3)]
    assert len(set(seeds)) == 4


def test_a_full_batch_needs_no_extra_round(tmp_path):
    filler, generator, source = _filler(tmp_path)
    batch = filler.score(generator.generate(0, [p for p in source.get_samples(4) if p.prompt_id % 2 == 0]))
    assert len(generator.calls) == 1 and len(batch.groups) == 2
    assert filler.metrics()["dynamic_sampling/rounds"] == 0.0
    assert all(is_informative(g) for g in batch.groups)


def test_the_data_source_cursor_moves_past_every_drawn_prompt(tmp_path):
    filler, generator, source = _filler(tmp_path)
    filler.score(generator.generate(0, source.get_samples(4)))
    assert [p.prompt_id for p in source.get_samples(2)] == [9, 10]  # 0..8 were drawn by rollout 0
