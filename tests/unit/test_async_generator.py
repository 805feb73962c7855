"""``AsyncRolloutGenerator`` on a real embedded engine (in this process, no Ray): the rollout it
generates ahead is what a checkpoint keeps (``in_flight``), and a generator given it back
(``resume_in_flight``) returns those very samples; the records survive JSON exactly. The
run-level proof, a 2-actor async run resumed bit for bit, is in
tests/integration/test_async_mode.py."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
from transformers import AutoTokenizer

from heron.checkpoint.checkpointer import in_flight_file
from heron.checkpoint.layout import IN_FLIGHT_FILE
from heron.config.data import DataConfig
from heron.config.rollout import RolloutConfig
from heron.data.lookahead import LookaheadSampler
from heron.data.source import PromptDataSource
from heron.records import Group, Prompt, RolloutBatch, Sample
from heron.rollout.async_generator import AsyncRolloutGenerator
from heron.rollout.embedded import EmbeddedEngine
from heron.rollout.generator import RolloutGenerator
from heron.rollout.prompt_format import PromptFormatter
from heron.weights.handle import InMemory, WeightHandle

BATCH = 2


def _generators(model_dir, data_path, tmp_path, name: str):
    """(sampler, async generator, inner generator) over a fresh engine and data source."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    engine = EmbeddedEngine.from_pretrained(model_dir, pad_token_id=tok.pad_token_id)
    inner = RolloutGenerator(engine, PromptFormatter(tok), RolloutConfig(batch_size=BATCH, samples_per_prompt=2,
                                                                         max_new_tokens=4), seed=0)
    sampler = LookaheadSampler(PromptDataSource(DataConfig(path=str(data_path)), seed=0))
    generator = AsyncRolloutGenerator(inner, sampler, batch_size=BATCH, num_rollouts=4, max_staleness=1,
                                      log_path=tmp_path / name / "staleness.jsonl")
    return sampler, generator, inner


def _round_trip(batch: RolloutBatch) -> RolloutBatch:
    return RolloutBatch.from_json(json.loads(json.dumps(batch.to_json(), separators=(",", ":"))))


def test_a_rollout_generated_ahead_is_saved_and_returned_after_a_resume(toy_model_dir, addition_data, tmp_path):
    sampler, generator, _ = _generators(toy_model_dir, addition_data["train"], tmp_path, "straight")
    assert generator.in_flight() is None  # nothing generated ahead yet
    first = generator.generate(0, sampler.get_samples(BATCH))
    saved_state, ahead = sampler.state_dict(), generator.in_flight()  # what a checkpoint after rollout 0 holds
    assert ahead.rollout_id == 1
    straight_prompts = sampler.get_samples(BATCH)
    straight = generator.generate(1, straight_prompts)
    assert straight is ahead  # the same objects the loop then trains

    # a resumed run: a fresh generator given the saved rollout and a sampler at the saved cursor;
    # its engine serves the restored policy, v1 (other weights: generating again would differ)
    sampler2, resumed, inner = _generators(toy_model_dir, addition_data["train"], tmp_path, "resumed")
    sampler2.load_state_dict(saved_state)
    weights = {k: v + 0.01 * torch.randn_like(v) for k, v in inner.engine.model.state_dict().items()}
    inner.engine.load_weights(WeightHandle(1, InMemory(weights)))
    assert inner.generate(1, straight_prompts) != straight
    assert resumed.resume_in_flight(_round_trip(ahead))
    assert resumed.generate(1, sampler2.get_samples(BATCH)) == straight
    assert resumed.in_flight().rollout_id == 2  # and it generates the next one ahead
    assert not inner.resume_in_flight(ahead)  # a sync generator takes none: it generates again
    generator.close()
    resumed.close()


def test_prompts_that_differ_from_the_saved_rollout_are_generated_again(toy_model_dir, addition_data, tmp_path, caplog):
    sampler, generator, inner = _generators(toy_model_dir, addition_data["train"], tmp_path, "run")
    first = sampler.get_samples(BATCH)
    saved = inner.generate(1, first)
    other = sampler.get_samples(BATCH)  # a data source that did not restore to the saved cursor
    generator.resume_in_flight(saved)
    with caplog.at_level(logging.WARNING, logger="heron.rollout"):
        batch = generator.generate(1, other)
    assert [g.prompt.prompt_id for g in batch.groups] == [p.prompt_id for p in other]
    assert "generating it again" in caplog.text
    generator.close()


def test_a_failed_generation_ahead_is_not_saved_and_raises_in_generate(toy_model_dir, addition_data, tmp_path):
    sampler, generator, inner = _generators(toy_model_dir, addition_data["train"], tmp_path, "run")

    def fail(rollout_id, prompts, seed=None):
        if rollout_id == 1:
            raise RuntimeError("engine died")
        return RolloutGenerator.generate(inner, rollout_id, prompts, seed)

    inner.generate = fail
    generator.generate(0, sampler.get_samples(BATCH))
    assert generator.in_flight() is None  # the checkpoint after rollout 0 is saved without it
    with pytest.raises(RuntimeError, match="engine died"):
        generator.generate(1, sampler.get_samples(BATCH))
    generator.close()


def test_rollout_records_survive_json_exactly():
    sample = Sample(
        rollout_id=3, prompt_id=7, sample_index=1, policy_version=2, prompt_tokens=[5, 6], response_tokens=[7, 8, 9],
        response_logprobs=[-0.1234567890123456789, -1e-300, -math.inf], loss_mask=[1, 0, 1], response_text="a\nb\u00e9",
        finish_reason="length", reward=0.5, advantage=-1.25, token_advantages=[0.1, 0.2, 0.3], values=[1.0, 2.0, 3.0],
        returns=[0.0, 0.5, 1.0],
    )
    prompt = Prompt(7, "1+1=", "2", metadata={"source": "x", "n": [1, 2]}, messages=[{"role": "user", "content": "1+1="}])
    batch = RolloutBatch(rollout_id=3, policy_version=2, groups=[Group(prompt, [sample])])
    assert _round_trip(batch) == batch


def test_a_rollout_that_is_not_json_is_left_out_of_the_checkpoint(toy_model_dir, addition_data, tmp_path, caplog):
    """A custom data source's prompt metadata need not be JSON: the save goes on without the
    in-flight rollout (a resume generates it again) instead of failing."""
    _, generator, inner = _generators(toy_model_dir, addition_data["train"], tmp_path, "run")
    batch = inner.generate(1, [Prompt(0, "1+1=", "2", metadata={"tags": {"a", "b"}})])
    generator.resume_in_flight(batch)
    with caplog.at_level(logging.WARNING, logger="heron.checkpoint"):
        assert in_flight_file(generator) == {}
    assert "rollout 1, generated ahead, is not saved" in caplog.text
    generator.resume_in_flight(inner.generate(1, [Prompt(0, "1+1=", "2", metadata={"tags": ["a", "b"]})]))
    assert RolloutBatch.from_json(json.loads(in_flight_file(generator)[IN_FLIGHT_FILE])) == generator.in_flight()
    generator.close()
