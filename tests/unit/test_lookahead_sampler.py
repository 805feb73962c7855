import json

from heron.config.data import DataConfig
from heron.data.lookahead import LookaheadSampler
from heron.data.source import PromptDataSource


def _source(path):
    return PromptDataSource(DataConfig(path=str(path)), seed=3)


def test_reserved_prompts_come_back_in_order_and_the_stream_is_unchanged(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "label": str(i + 1)}) + "\n" for i in range(10)))
    plain, ahead = _source(path), LookaheadSampler(_source(path))
    expected = [[p.prompt_id for p in plain.get_samples(3)] for _ in range(4)]
    got = [ahead.get_samples(3)]
    reserved = ahead.reserve(3)
    state = ahead.state_dict()
    assert ahead.get_samples(3) == reserved
    got += [reserved, ahead.get_samples(3), ahead.get_samples(3)]
    assert [[p.prompt_id for p in g] for g in got] == expected
    # a checkpoint taken while a rollout is in flight resumes at that rollout's prompts
    resumed = LookaheadSampler(_source(path))
    resumed.load_state_dict(state)
    assert [p.prompt_id for p in resumed.get_samples(3)] == expected[1]
